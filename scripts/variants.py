"""Rule `variants`: two or more engine configurations of the model, their servers side by side
taking turns, round by round, on the same requests, and with variants.capacity each one's SLO
capacity, their probes in turns -> variants.json (docs/method.md#variants)."""

import httpx

from infbench.capacity.measure import ServerSearches
from infbench.capacity.probe import Rule, TimeBudget
from infbench.core.artifacts import read_jsonl
from infbench.core.stage import run_stage
from infbench.engines.server_metrics import server_kv_facts
from infbench.engines.servers import spec_from_params
from infbench.engines.settings import server_max_num_seqs
from infbench.engines.vllm_server import ServerError, started_together
from infbench.serving.variants import capacities_in_turns, comparisons, run_rounds, variants_of, vllm_version


def max_num_seqs_of(params, variant) -> int | None:
    """The cap on running requests the binding limit reads: a flag's (flags override the engine
    settings on the server), else the variant's engine.max_num_seqs, else vLLM's default where
    the variant runs this interpreter's vLLM with no flag that moves it; unknown (None) for an
    endpoint or otherwise."""
    if variant.endpoint:
        return None
    for flag in ("max_num_seqs", "max-num-seqs"):
        if flag in variant.flags:
            return int(variant.flags[flag])
    engine = {**params.engine, **variant.engine}
    moved = {"max_num_batched_tokens", "max-num-batched-tokens"} & set(variant.flags)
    if not engine.get("max_num_seqs") and (variant.python or moved):
        return None
    return server_max_num_seqs(engine)["value"]


def kv_facts_of(name: str, server) -> dict | None:
    """The server's KV-cache facts from its /metrics; None where it publishes none (an endpoint
    that is not vLLM): its search then starts unseeded and its limit is read without them."""
    if not server.metrics:
        return None
    try:
        return server_kv_facts(server.base_url)
    except (ServerError, httpx.HTTPError, KeyError, ValueError) as error:  # another vLLM's labels too
        why = (str(error).splitlines() or [type(error).__name__])[0]
        print(f"variant {name}: no KV-cache facts ({why}); its search starts unseeded")
        return None


def searches_of(params, variants, servers, workload, pool, budget: TimeBudget) -> dict[str, ServerSearches]:
    """Each variant's capacity search on its server, all within `budget`; every variant's
    prober draws from the pool in the same seeded order, each probe going on where that
    variant's last one stopped."""
    searches = {}
    for variant in variants:
        server = servers[variant.name]
        searches[variant.name] = ServerSearches(
            server, workload, pool, params.capacity, params.load, kv_facts_of(variant.name, server),
            max_model_len=variant.engine.get("max_model_len", params.engine["max_model_len"]),
            max_num_seqs=max_num_seqs_of(params, variant), seed=params.seed,
            timeout_s=params.server["request_timeout_s"],
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
