"""Rule `hf_baseline`: Transformers generate() on the shared scenarios -> hf_baseline.json."""

from pathlib import Path

from infbench import provenance
from infbench.artifacts import read_json, read_jsonl, write_json
from infbench.engines import pin_process
from infbench.logging_setup import rule_logging
from infbench.scenarios import fair_settings, offline_artifact

with rule_logging(snakemake.log[0]):
    params = snakemake.params
    started = provenance.now_iso()
    cpus = pin_process(params.threads, params.device)

    from infbench.hf_bench import HFRunner

    model_dir = Path(snakemake.input.model)
    facts = read_json(model_dir / "model.json")
    settings = fair_settings(params.dtype, params.threads, cpus, params.benchmark, params.seed,
                             prefix_caching=False)
    runner = HFRunner(str(model_dir), params.dtype, params.threads)
    artifact = offline_artifact("hf", facts["name"], runner, read_jsonl(snakemake.input.workload), settings,
                                facts["kv_bytes_per_token"][params.dtype])
    artifact["provenance"] = provenance.collect(params.provenance_config, params.threads, started, params.device)
    write_json(snakemake.output[0], artifact, schema_name="offline")
