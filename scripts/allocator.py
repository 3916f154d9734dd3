"""Rule `allocator`: simulate KV-cache allocation strategies -> allocator.json."""

from infbench.core.artifacts import read_json, read_jsonl
from infbench.core.stage import run_stage
from infbench.engines.settings import kv_cache_bytes
from infbench.kv.allocator import analyse


def main(stage):
    params = stage.params
    analysis = analyse(
        workload=read_jsonl(stage.input.workload),
        vllm_offline=read_json(stage.input.vllm),
        model_facts=stage.facts,
        dtype=params.dtype,
        budget_bytes=kv_cache_bytes(params.kv_cache_gib),
        max_model_len=params.max_model_len,
        settings=params.allocator,
        seed=params.seed,
    )
    stage.write(stage.output[0], analysis, schema="allocator")
    for item in analysis["checks"]:
        print(f"{item['status']}: {item['name']}: {item['detail']}")


if __name__ == "__main__":
    run_stage(main, snakemake)
