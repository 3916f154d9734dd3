"""Rule `hf_baseline`: Transformers generate() on the shared scenarios -> hf_baseline.json."""

from infbench.core.artifacts import read_jsonl
from infbench.core.stage import run_stage
from infbench.engines.settings import pin_process
from infbench.offline.scenarios import fair_settings, offline_artifact


def main(stage):
    params = stage.params
    cpus = pin_process(params.threads, params.device)  # before torch creates its thread pool

    from infbench.offline.hf_baseline import HFRunner

    facts = stage.facts
    settings = fair_settings(
        dtype=params.dtype,
        threads=params.threads,
        cpus=cpus,
        benchmark=params.benchmark,
        seed=params.seed,
        prefix_caching=False,
    )
    runner = HFRunner(str(stage.model_dir), params.dtype, params.threads, params.device)
    artifact = offline_artifact(
        engine="hf",
        model=facts["name"],
        runner=runner,
        workload=read_jsonl(stage.input.workload),
        settings=settings,
        kv_bytes_per_token=facts["kv_bytes_per_token"][params.dtype],
    )
    stage.write(stage.output[0], artifact, schema="offline")


if __name__ == "__main__":
    run_stage(main, snakemake)
