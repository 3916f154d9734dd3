"""Rule `hf_baseline`: Transformers generate() on the shared scenarios -> hf_baseline.json."""

from pathlib import Path

from infbench import provenance
from infbench.artifacts import read_json, read_jsonl, write_json
from infbench.engine_settings import pin_process
from infbench.offline_scenarios import fair_settings, offline_artifact
from infbench.rule_logging import rule_logging


def main(snakemake):
    params = snakemake.params
    started = provenance.now_iso()
    cpus = pin_process(params.threads, params.device)  # before torch creates its thread pool

    from infbench.hf_runner import HFRunner

    model_dir = Path(snakemake.input.model)
    facts = read_json(model_dir / "model.json")
    settings = fair_settings(
        dtype=params.dtype,
        threads=params.threads,
        cpus=cpus,
        benchmark=params.benchmark,
        seed=params.seed,
        prefix_caching=False,
    )
    runner = HFRunner(str(model_dir), params.dtype, params.threads, params.device)
    artifact = offline_artifact(
        engine="hf",
        model=facts["name"],
        runner=runner,
        workload=read_jsonl(snakemake.input.workload),
        settings=settings,
        kv_bytes_per_token=facts["kv_bytes_per_token"][params.dtype],
    )
    artifact["provenance"] = provenance.collect(params.provenance_config, params.threads, started, params.device)
    write_json(snakemake.output[0], artifact, schema_name="offline")


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
