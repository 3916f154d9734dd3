"""Rule `allocator`: simulate KV-cache allocation strategies -> allocator.json."""

from pathlib import Path
from infbench import provenance
from infbench.allocator import analyse
from infbench.artifacts import read_json, read_jsonl, write_json
from infbench.engines import kv_cache_bytes
from infbench.logging_setup import rule_logging

with rule_logging(snakemake.log[0]):
    params = snakemake.params
    started = provenance.now_iso()
    analysis = analyse(read_jsonl(snakemake.input.workload), read_json(snakemake.input.vllm),
                       read_json(Path(snakemake.input.model) / "model.json"), params.dtype, kv_cache_bytes(params.kv_cache_gib),
                       params.max_model_len, params.allocator, params.seed,
                       load=read_json(snakemake.input.load) if snakemake.input.get("load") else None,
                       server=read_json(snakemake.input.server) if snakemake.input.get("server") else None)
    analysis["provenance"] = provenance.collect(params.provenance_config, None, started)
    write_json(snakemake.output[0], analysis, schema_name="allocator")
    check = analysis["capacity_check"]
    print(f"study reproduced exactly: {analysis['study']['matches_study']}")
    print(f"capacity check against vLLM: {check['status']} (predicted {check['predicted']['num_blocks']} blocks, "
          f"vLLM {check['vllm']['num_blocks']})")
    print(f"live validation: {analysis['live_validation']['status']}")
