"""Rule `machine`: this machine's memory bandwidth, STREAM's triad on the engine's cores -> machine.json."""

from infbench.core import provenance
from infbench.core.artifacts import write_json
from infbench.core.rule_logging import rule_logging
from infbench.engines.settings import pin_process


def main(snakemake):
    params = snakemake.params
    started = provenance.now_iso()
    cpus = pin_process(params.threads, params.device)  # before torch starts its threads
    import torch

    from infbench.utilisation.bandwidth import triad_bandwidth

    torch.set_num_threads(params.threads)
    bandwidth = triad_bandwidth(params.device)
    write_json(
        snakemake.output[0],
        {
            "memory_bandwidth": {**bandwidth, "pinned_cpus": cpus if params.device == "cpu" else None},
            "provenance": provenance.collect(params.provenance_config, params.threads, started, params.device),
        },
        schema_name="machine",
    )
    print(
        f"memory bandwidth: best {bandwidth['best_bytes_per_s'] / 1e9:.1f} GB/s, median "
        f"{bandwidth['median_bytes_per_s'] / 1e9:.1f} GB/s over {bandwidth['passes']} triad passes"
    )


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
