"""Benchmark: this pipeline's load client beside vLLM's own `vllm bench serve` client on one
server, with the same prompts, output lengths and concurrency, in alternating rounds so the
machine's noise hits both alike: the `client_fidelity` stage's own code
(`infbench.serving.client_fidelity.measure_client_fidelity`), at any size, on the server your
config describes (engine, device, threads, dtype, start-up timeout). Prints each client's
medians over rounds and ours / vLLM's with a paired 95 % interval.

    python scripts/bench_client_fidelity.py --model smollm2-135m-instruct --concurrency 8 \\
        --requests 64 --output-tokens 64 --rounds 5

The model folder and workload are those a run of the pipeline made (resources/models/NAME,
results/NAME/workload.jsonl); the workload's API (completions or chat) is the one it ran.
"""

import argparse
import statistics
import tempfile
from pathlib import Path

import yaml

from infbench.core.artifacts import read_jsonl
from infbench.core.config import validate_config
from infbench.core.hardware import resolve_dtype
from infbench.engines.servers import ServerSpec
from infbench.serving.client import cycle_requests
from infbench.serving.client_fidelity import fidelity_ratios, measure_client_fidelity
from infbench.serving.sweep import ACROSS_REPEATS

REPO = Path(__file__).resolve().parents[1]
SHOWN = (*ACROSS_REPEATS, "client_cpu_s")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "config" / "config.yaml"), help="the pipeline's config")
    parser.add_argument("--model", help="a model name from the config (default: its first)")
    parser.add_argument("--results", default="results", help="the run's results folder (its workload)")
    parser.add_argument("--resources", default="resources", help="the run's resources folder (its model)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()

    config = validate_config(
        yaml.safe_load(Path(options.config).read_text()), REPO / "workflow" / "schemas" / "config.schema.yaml", REPO
    )
    name = options.model or config["models"][0]["name"]
    model_dir = (Path(options.resources) / "models" / name).resolve()
    workload = read_jsonl(Path(options.results) / name / "workload.jsonl")
    requests = cycle_requests(workload, options.requests)
    for request in requests:
        request.max_tokens = options.output_tokens
    dtype = resolve_dtype(config["hardware"]["dtype"], config["hardware"]["device"])
    spec = ServerSpec.from_config(config, model_dir, name, dtype)
    with tempfile.TemporaryDirectory() as scratch:
        measured = measure_client_fidelity(
            spec,
            Path(scratch) / "server.log",
            requests,
            concurrency=options.concurrency,
            rounds=options.rounds,
            interval_s=config["load"]["metrics_interval_s"],
            timeout_s=config["server"]["request_timeout_s"],
            api=workload[0]["api"],
        )
    rounds = measured["rounds"]
    ratios = fidelity_ratios(rounds)
    print(f"{'metric':20s} {'ours (median)':>14s} {'vllm (median)':>14s} {'ours/vllm':>10s} {'95 % CI':>16s}")
    for key in SHOWN:
        mine = statistics.median(r["ours"][key] for r in rounds)
        reference = statistics.median(r["vllm"][key] for r in rounds)
        line = f"{key:20s} {mine:14.2f} {reference:14.2f}"
        if key in ratios and ratios[key]["ratio"] is None:
            line += f" {'no ratio':>10s}   {ratios[key]['no_ratio']}"
        elif key in ratios:
            ratio = ratios[key]
            line += f" {ratio['ratio']:10.3f}   [{ratio['ci95_low']:.3f}, {ratio['ci95_high']:.3f}]"
        else:
            line += f" {mine / reference:10.3f}"
        print(line)
    print(
        "output tokens per round:",
        [(r["ours"]["total_output_tokens"], r["vllm"]["total_output_tokens"]) for r in rounds],
    )


if __name__ == "__main__":
    main()
