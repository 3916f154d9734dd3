"""Rule `tuning`: a grid of server settings, one server start per cell -> tuning.json."""

from pathlib import Path

from infbench.core import provenance
from infbench.core.artifacts import read_json, read_jsonl, write_json
from infbench.core.rule_logging import rule_logging
from infbench.engines.settings import engine_env, vllm_engine_args
from infbench.engines.vllm_server import raise_on_sigterm
from infbench.serving.tuning import best_cell, run_tuning


def main(snakemake):
    raise_on_sigterm()
    params = snakemake.params
    started = provenance.now_iso()
    from transformers import AutoTokenizer

    model_dir = Path(snakemake.input.model)
    facts = read_json(model_dir / "model.json")
    cells = run_tuning(
        engine_args=vllm_engine_args(model_dir, params.dtype, params.engine, params.seed, params.device),
        served_name=facts["name"],
        env=engine_env(params.threads, params.device),
        log_dir=snakemake.log.servers,
        workload=read_jsonl(snakemake.input.workload),
        tuning=params.tuning,
        server_settings=params.server,
        load=params.load,
        capacity=params.capacity,
        device=params.device,
        seed=params.seed,
        tokenizer=AutoTokenizer.from_pretrained(model_dir),
        prefix_caching=params.engine["enable_prefix_caching"],
    )
    write_json(
        snakemake.output[0],
        {
            "model": facts["name"],
            "grid": params.tuning["grid"],
            "requests": params.tuning["requests"],
            "concurrency": params.tuning["concurrency"],
            "cells": cells,
            "best_cell": best_cell(cells),
            "provenance": provenance.collect(params.provenance_config, params.threads, started, params.device),
        },
        schema_name="tuning",
    )


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
