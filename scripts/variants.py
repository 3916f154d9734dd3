"""Rule `variants`: two or more engine configurations of the model, their servers side by side
taking turns, round by round, on the same requests -> variants.json (docs/method.md#variants)."""

from infbench.core.artifacts import read_jsonl
from infbench.core.stage import run_stage
from infbench.engines.servers import spec_from_params
from infbench.engines.vllm_server import started_together
from infbench.serving.variants import comparisons, run_rounds, variants_of, vllm_version


def main(stage):
    params = stage.params
    settings = params.variants
    variants = variants_of(settings)
    versions = {variant.name: vllm_version(variant) for variant in variants}
    spec = spec_from_params(params, stage.model_dir, stage.facts["name"])
    servers = {
        variant.name: variant.server(spec, stage.servers_log_dir / f"{variant.name}.log") for variant in variants
    }
    with started_together({f"variant {name}": server for name, server in servers.items()}):
        for name, server in servers.items():
            started = (
                f"after {server.startup_s:.1f} s" if server.startup_s is not None else "(an endpoint run elsewhere)"
            )
            print(f"variant {name}: server ready on {server.base_url} {started}")
        rounds = run_rounds(
            servers,
            read_jsonl(stage.input.workload),
            levels=settings["concurrency"],
            requests=settings["requests"],
            rounds=settings["rounds"],
            slo_ms=params.slo_ms,
            timeout_s=params.server["request_timeout_s"],
            seed=params.seed,
        )
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
            "comparisons": comparisons(rounds, stage.facts["name"], variants[0].name, settings["threshold"]),
        },
        schema="variants",
    )


if __name__ == "__main__":
    run_stage(main, snakemake)
