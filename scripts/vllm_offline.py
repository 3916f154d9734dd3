"""Rule `vllm_offline`: vllm.LLM on the shared scenarios -> vllm_offline.json."""

from infbench.core.artifacts import read_jsonl
from infbench.core.stage import run_stage
from infbench.engines.settings import kv_cache_bytes, pin_process, vllm_engine_args
from infbench.offline.scenarios import fair_settings, offline_artifact


def main(stage):
    params = stage.params
    cpus = pin_process(params.threads, params.device)  # before torch creates its thread pool

    from infbench.offline.vllm_offline import VLLMRunner, engine_facts

    facts = stage.facts
    workload = read_jsonl(stage.input.workload)
    runner = VLLMRunner(vllm_engine_args(stage.model_dir, params.dtype, params.engine, params.seed, params.device))
    settings = fair_settings(
        dtype=params.dtype,
        threads=params.threads,
        cpus=cpus,
        benchmark=params.benchmark,
        seed=params.seed,
        prefix_caching=params.engine["enable_prefix_caching"],
    )
    artifact = offline_artifact(
        engine="vllm",
        model=facts["name"],
        runner=runner,
        workload=workload,
        settings=settings,
        kv_bytes_per_token=facts["kv_bytes_per_token"][params.dtype],
    )
    artifact["natural_output_tokens"] = runner.natural_output_tokens(workload)
    artifact["engine_facts"] = engine_facts(runner.llm, params.engine["max_model_len"], runner.startup_s)
    artifact["engine_facts"]["kv_cache_bytes"] = kv_cache_bytes(params.engine["kv_cache_gib"])
    stage.write(stage.output[0], artifact, schema="offline")


# vLLM starts its engine core with spawn, which re-imports this file: only the parent runs.
if __name__ == "__main__":
    run_stage(main, snakemake)
