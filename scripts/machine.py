"""Rule `machine`: this machine's memory bandwidth on the engine's cores, read and STREAM's triad ->
machine.json."""

from infbench.core.stage import run_stage
from infbench.engines.settings import pin_process


def main(stage):
    params = stage.params
    cpus = pin_process(params.threads, params.device)  # before torch starts its threads
    import torch

    from infbench.utilisation.bandwidth import memory_bandwidth

    torch.set_num_threads(params.threads)
    bandwidth = memory_bandwidth(params.device)
    stage.write(
        stage.output[0],
        {"memory_bandwidth": {**bandwidth, "pinned_cpus": cpus if params.device == "cpu" else None}},
        schema="machine",
    )
    for record in (bandwidth, bandwidth["triad"]):
        print(
            f"{record['method']}: best {record['best_bytes_per_s'] / 1e9:.1f} GB/s, median "
            f"{record['median_bytes_per_s'] / 1e9:.1f} GB/s over {record['passes']} passes"
        )


if __name__ == "__main__":
    run_stage(main, snakemake)
