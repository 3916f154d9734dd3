"""Rule `prefix_caching`: two servers of the model, prefix caching off and on, alive together,
taking turns on the shared-prefix and conversation request sets -> prefix_caching.json."""

from infbench.core.artifacts import read_jsonl
from infbench.core.stage import run_stage
from infbench.engines.servers import spec_from_params, start_server
from infbench.engines.vllm_server import started_together
from infbench.serving.prefix_caching import ARMS, run_rounds, summarize_sets
from infbench.serving.prefix_sets import conversation_set, shared_prefix_set
from infbench.workload.requests import Prompts


def main(stage):
    params = stage.params
    settings = params.prefix_caching
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(stage.model_dir)
    workload = read_jsonl(stage.input.workload)
    prompts = Prompts(tokenizer, workload[0]["api"])
    max_model_len = params.engine["max_model_len"]
    sets = [
        shared_prefix_set(prompts, workload, settings["shared_prefix"], max_model_len, params.seed),
        conversation_set(prompts, workload, settings["conversations"], max_model_len, params.seed),
    ]
    # The dev-mode endpoint /reset_prefix_cache empties the cache before each pass.
    spec = spec_from_params(params, stage.model_dir, stage.facts["name"]).with_env(VLLM_SERVER_DEV_MODE="1")
    servers = {
        arm: start_server(
            spec.with_engine(enable_prefix_caching=arm == "on"), stage.servers_log_dir / f"prefix_caching_{arm}.log"
        )
        for arm in ARMS
    }
    with started_together({f"the server with prefix caching {arm}": s for arm, s in servers.items()}):
        for arm, server in servers.items():
            print(f"server with prefix caching {arm} ready on {server.base_url} after {server.startup_s:.1f} s")
        rounds = run_rounds(
            servers,
            sets,
            rounds=settings["rounds"],
            concurrency=settings["concurrency"],
            interval_s=params.metrics_interval_s,
            timeout_s=params.server["request_timeout_s"],
        )
    results, checks = summarize_sets(sets, rounds, tokenizer, params.engine["block_size"])
    stage.write(
        stage.output[0],
        {
            "model": stage.facts["name"],
            "settings": settings,
            "api": prompts.api,
            "sets": results,
            "rounds": rounds,
            "checks": checks,
        },
        schema="prefix_caching",
    )


if __name__ == "__main__":
    run_stage(main, snakemake)
