"""Rule `hf_baseline`: Transformers generate() on the shared scenarios -> hf_baseline.json."""

from pathlib import Path

from infbench.core import provenance
from infbench.core.artifacts import read_json, read_jsonl, write_json
from infbench.core.rule_logging import rule_logging
from infbench.engines.settings import pin_process
from infbench.offline.scenarios import fair_settings, offline_artifact


def main(snakemake):
    params = snakemake.params
    started = provenance.now_iso()
    cpus = pin_process(params.threads, params.device)  # before torch creates its thread pool

    from infbench.offline.hf_baseline import HFRunner

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
