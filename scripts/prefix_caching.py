"""Rule `prefix_caching`: two servers of the model, prefix caching off and on, alive together,
taking turns on the shared-prefix and conversation request sets -> prefix_caching.json."""

from pathlib import Path

from infbench.core import provenance
from infbench.core.artifacts import read_json, read_jsonl, write_json
from infbench.core.rule_logging import rule_logging
from infbench.engines.settings import engine_env, vllm_engine_args
from infbench.engines.vllm_server import VLLMServer, raise_on_sigterm, started_together
from infbench.serving.prefix_caching import ARMS, run_rounds, summarize_sets
from infbench.serving.prefix_sets import conversation_set, shared_prefix_set
from infbench.workload.requests import Prompts


def main(snakemake):
    raise_on_sigterm()
    params = snakemake.params
    study = params.prefix_caching
    started = provenance.now_iso()
    from transformers import AutoTokenizer

    model_dir = Path(snakemake.input.model)
    facts = read_json(model_dir / "model.json")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    workload = read_jsonl(snakemake.input.workload)
    prompts = Prompts(tokenizer, workload[0]["api"])
    max_model_len = params.engine["max_model_len"]
    sets = [
        shared_prefix_set(prompts, workload, study["shared_prefix"], max_model_len, params.seed),
        conversation_set(prompts, workload, study["conversations"], max_model_len, params.seed),
    ]
    servers = {
        arm: VLLMServer(
            vllm_engine_args(
                model_dir,
                params.dtype,
                {**params.engine, "enable_prefix_caching": arm == "on"},
                params.seed,
                params.device,
            ),
            facts["name"],
            Path(snakemake.log.servers) / f"prefix_caching_{arm}.log",
            # The dev-mode endpoint /reset_prefix_cache empties the cache before each pass.
            env={**engine_env(params.threads, params.device), "VLLM_SERVER_DEV_MODE": "1"},
            startup_timeout_s=params.server["startup_timeout_s"],
        )  # fmt: skip
        for arm in ARMS
    }
    with started_together(list(servers.values())):
        for arm, server in servers.items():
            print(f"server with prefix caching {arm} ready on {server.base_url} after {server.startup_s:.1f} s")
        rounds = run_rounds(
            servers,
            sets,
            rounds=study["rounds"],
            concurrency=study["concurrency"],
            interval_s=params.metrics_interval_s,
            timeout_s=params.server["request_timeout_s"],
        )
    results, checks = summarize_sets(sets, rounds, tokenizer, params.engine["block_size"])
    write_json(
        snakemake.output[0],
        {
            "model": facts["name"],
            "settings": study,
            "api": prompts.api,
            "sets": results,
            "rounds": rounds,
            "checks": checks,
            "provenance": provenance.collect(params.provenance_config, params.threads, started, params.device),
        },
        schema_name="prefix_caching",
    )


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
