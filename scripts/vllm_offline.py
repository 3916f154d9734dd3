"""Rule `vllm_offline`: vllm.LLM on the shared scenarios -> vllm_offline.json."""

from pathlib import Path

from infbench.core import provenance
from infbench.core.artifacts import read_json, read_jsonl, write_json
from infbench.core.rule_logging import rule_logging
from infbench.engines.settings import kv_cache_bytes, pin_process, vllm_engine_args
from infbench.offline.scenarios import fair_settings, offline_artifact


def main(snakemake):
    params = snakemake.params
    started = provenance.now_iso()
    cpus = pin_process(params.threads, params.device)  # before torch creates its thread pool

    from infbench.offline.vllm_offline import VLLMRunner, engine_facts

    model_dir = Path(snakemake.input.model)
    facts = read_json(model_dir / "model.json")
    workload = read_jsonl(snakemake.input.workload)
    runner = VLLMRunner(vllm_engine_args(model_dir, params.dtype, params.engine, params.seed, params.device))
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
    artifact["provenance"] = provenance.collect(params.provenance_config, params.threads, started, params.device)
    write_json(snakemake.output[0], artifact, schema_name="offline")


# vLLM starts its engine core with spawn, which re-imports this file: only the parent runs.
if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
