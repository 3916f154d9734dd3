"""Rule `variants`: two or more engine configurations of the model, their servers side by side
taking turns, round by round, on the same requests, and with variants.capacity each one's SLO
capacity, their probes in turns -> variants.json (docs/method.md#variants)."""

from infbench.capacity.measure import ServerSearches
from infbench.capacity.probe import Rule, TimeBudget
from infbench.core.artifacts import read_jsonl
from infbench.core.stage import run_stage
from infbench.engines.server_metrics import server_kv_facts
from infbench.engines.servers import spec_from_params
from infbench.engines.settings import server_max_num_seqs
from infbench.engines.vllm_server import started_together
from infbench.serving.variants import capacities_in_turns, comparisons, run_rounds, variants_of, vllm_version


def searches_of(params, variants, servers, workload, pool, budget: TimeBudget) -> dict[str, ServerSearches]:
    """Each variant's capacity searches on its server, all within `budget`; every variant's
    prober draws the same requests in the same order (one seed)."""
    searches = {}
    for variant in variants:
        server = servers[variant.name]
        max_num_seqs = None if variant.endpoint else server_max_num_seqs({**params.engine, **variant.engine})["value"]
        searches[variant.name] = ServerSearches(
            server, workload, pool, params.capacity, params.load,
            server_kv_facts(server.base_url) if server.metrics else None,
            max_model_len=variant.engine.get("max_model_len", params.engine["max_model_len"]),
            max_num_seqs=max_num_seqs, seed=params.seed, timeout_s=params.server["request_timeout_s"],
            budget=budget, progress=lambda line, name=variant.name: print(f"variant {name}: {line}"),
        )  # fmt: skip
    return searches


def main(stage):
    params = stage.params
    settings = params.variants
    variants = variants_of(settings)
    versions = {variant.name: vllm_version(variant) for variant in variants}
    spec = spec_from_params(params, stage.model_dir, stage.facts["name"])
    servers = {
        variant.name: variant.server(spec, stage.servers_log_dir / f"{variant.name}.log") for variant in variants
    }
    workload = read_jsonl(stage.input.workload)
    with started_together({f"variant {name}": server for name, server in servers.items()}):
        for name, server in servers.items():
            started = (
                f"after {server.startup_s:.1f} s" if server.startup_s is not None else "(an endpoint run elsewhere)"
            )
            print(f"variant {name}: server ready on {server.base_url} {started}")
        rounds = run_rounds(
            servers,
            workload,
            levels=settings["concurrency"],
            requests=settings["requests"],
            rounds=settings["rounds"],
            slo_ms=params.slo_ms,
            timeout_s=params.server["request_timeout_s"],
            seed=params.seed,
        )
        capacities = None
        if settings["capacity"]:
            # capacity.max_search_s a variant, shared: the searches take turns.
            budget = TimeBudget(params.capacity["max_search_s"] * len(variants))
            print(f"capacity: each variant's concurrency search, the probes in turns, within {budget.seconds:g} s")
            searches = searches_of(params, variants, servers, workload, read_jsonl(stage.input.pool), budget)
            capacities = capacities_in_turns(searches, budget)
    stage.write(
        stage.output[0],
        {
            "model": stage.facts["name"],
            "settings": settings,
            "baseline": variants[0].name,
            "threshold": settings["threshold"],
            "startup_s": {name: server.startup_s for name, server in servers.items()},
            "vllm_versions": versions,
            "prefix_cache_reset": {name: bool(server.resets_prefix_cache) for name, server in servers.items()},
            "rounds": rounds,
            "capacity": {
                "slo_ms": params.slo_ms,
                "attainment_target": params.capacity["attainment"],
                "decision_rule": Rule.of(params.capacity).to_json(),
                "searches": capacities,
            }
            if capacities
            else None,
            "comparisons": comparisons(
                rounds, stage.facts["name"], variants[0].name, settings["threshold"], capacities, params.slo_ms
            ),
        },
        schema="variants",
    )


if __name__ == "__main__":
    run_stage(main, snakemake)
