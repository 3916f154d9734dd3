"""Rule `tuning`: a grid of server settings, one server start per cell -> tuning.json."""

from infbench.core.artifacts import read_jsonl
from infbench.core.stage import run_stage
from infbench.engines.servers import spec_from_params
from infbench.serving.tuning import best_cell, run_tuning


def main(stage):
    params = stage.params
    from transformers import AutoTokenizer

    cells = run_tuning(
        spec=spec_from_params(params, stage.model_dir, stage.facts["name"]),
        log_dir=stage.servers_log_dir,
        workload=read_jsonl(stage.input.workload),
        pool=read_jsonl(stage.input.pool),
        tuning=params.tuning,
        request_timeout_s=params.server["request_timeout_s"],
        load=params.load,
        capacity=params.capacity,
        tokenizer=AutoTokenizer.from_pretrained(stage.model_dir),
    )
    stage.write(
        stage.output[0],
        {
            "model": stage.facts["name"],
            "grid": params.tuning["grid"],
            "requests": params.tuning["requests"],
            "concurrency": params.tuning["concurrency"],
            "cells": cells,
            "best_cell": best_cell(cells),
        },
        schema="tuning",
    )


if __name__ == "__main__":
    run_stage(main, snakemake)
