"""Rule `allocator`: simulate KV-cache allocation strategies -> allocator.json."""

from pathlib import Path

from infbench.core import provenance
from infbench.core.artifacts import read_json, read_jsonl, write_json
from infbench.core.rule_logging import rule_logging
from infbench.engines.settings import kv_cache_bytes
from infbench.kv.allocator import analyse


def main(snakemake):
    params = snakemake.params
    started = provenance.now_iso()
    analysis = analyse(
        workload=read_jsonl(snakemake.input.workload),
        vllm_offline=read_json(snakemake.input.vllm),
        model_facts=read_json(Path(snakemake.input.model) / "model.json"),
        dtype=params.dtype,
        budget_bytes=kv_cache_bytes(params.kv_cache_gib),
        max_model_len=params.max_model_len,
        settings=params.allocator,
        seed=params.seed,
    )
    analysis["provenance"] = provenance.collect(params.provenance_config, None, started)
    write_json(snakemake.output[0], analysis, schema_name="allocator")
    check = analysis["pool_sizing_check"]
    print(f"study reproduced exactly: {analysis['study']['matches_study']}")
    print(
        f"vLLM's pool-sizing formula reproduced: {check['status']} "
        f"(predicted {check['predicted']['num_blocks']} blocks, vLLM {check['vllm']['num_blocks']})"
    )


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
