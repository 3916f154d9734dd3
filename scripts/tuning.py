"""Rule `tuning`: a grid of server settings, one server start per cell -> tuning.json."""

from pathlib import Path

from infbench import provenance
from infbench.artifacts import read_json, read_jsonl, write_json
from infbench.engines import engine_env, vllm_engine_args
from infbench.logging_setup import rule_logging
from infbench.server import raise_on_sigterm
from infbench.serving import run_tuning


def main(snakemake):
    raise_on_sigterm()
    params = snakemake.params
    started = provenance.now_iso()
    from transformers import AutoTokenizer

    model_dir = Path(snakemake.input.model)
    facts = read_json(model_dir / "model.json")
    cells = run_tuning(vllm_engine_args(model_dir, params.dtype, params.engine, params.seed, params.device),
                       facts["name"], engine_env(params.threads, params.device), snakemake.log.servers,
                       read_jsonl(snakemake.input.workload), params.tuning, params.server, params.load, params.seed,
                       AutoTokenizer.from_pretrained(model_dir), params.engine["enable_prefix_caching"])
    write_json(snakemake.output[0], {
        "model": facts["name"], "grid": params.tuning["grid"], "requests": params.tuning["requests"],
        "concurrency": params.tuning["concurrency"], "cells": cells,
        "provenance": provenance.collect(params.provenance_config, params.threads, started, params.device),
    }, schema_name="tuning")


if __name__ == "__main__":
    with rule_logging(snakemake.log.rule):
        main(snakemake)
