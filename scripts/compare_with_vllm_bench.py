"""Benchmark: this pipeline's load client beside vLLM's own `vllm bench serve` client on one
server, with the same prompts, output lengths and concurrency, in alternating rounds so the
machine's noise hits both alike (the `client_fidelity` rule's procedure, at any size). Prints
each client's medians over rounds and ours / vLLM's with a paired 95 % interval.

    python scripts/compare_with_vllm_bench.py --model-dir resources/models/smollm2-135m-instruct \\
        --workload results/smollm2-135m-instruct/workload.jsonl --concurrency 8 --requests 64 \\
        --output-tokens 64 --rounds 5
"""

import argparse
import statistics
import tempfile
from pathlib import Path

from infbench.core.artifacts import read_jsonl
from infbench.core.hardware import resolve_dtype
from infbench.engines.settings import engine_env, place_client, vllm_engine_args
from infbench.engines.vllm_server import VLLMServer
from infbench.serving.client import cycle_requests
from infbench.serving.client_fidelity import (
    alternate,
    fidelity_ratios,
    run_ours,
    run_vllm_bench,
    vllm_bench_arguments,
    write_dataset,
)

SHOWN = (
    "output_throughput",
    "request_throughput",
    "median_ttft_ms",
    "median_tpot_ms",
    "median_itl_ms",
    "median_e2el_ms",
    "client_cpu_s",
)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--metrics-interval-s", type=float, default=0.5, help="our client's /metrics scrape period")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()

    model_dir = Path(options.model_dir).resolve()
    requests = cycle_requests(read_jsonl(options.workload), options.requests)
    for request in requests:
        request.max_tokens = options.output_tokens
    engine = {"max_model_len": 512, "kv_cache_gib": 1.0, "block_size": 128, "enable_prefix_caching": False}
    args = vllm_engine_args(model_dir, resolve_dtype("auto", "cpu"), engine, options.seed, "cpu")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        dataset = scratch / "prompts.jsonl"
        write_dataset(requests, dataset)
        with VLLMServer(args, "model", scratch / "server.log", env=engine_env(options.threads, "cpu")) as server:
            print(place_client(options.threads, "cpu")["note"])
            arguments = vllm_bench_arguments(
                base_url=server.base_url,
                served_name=server.served_name,
                tokenizer_dir=model_dir,
                dataset=dataset,
                count=len(requests),
                concurrency=options.concurrency,
                seed=options.seed,
                result_dir=scratch,
            )
            rounds = alternate(
                lambda: run_ours(
                    base_url=server.base_url,
                    served_name=server.served_name,
                    requests=requests,
                    concurrency=options.concurrency,
                    seed=options.seed,
                    interval_s=options.metrics_interval_s,
                    timeout_s=600,
                ),
                lambda: run_vllm_bench(arguments, scratch),
                options.rounds,
            )
    ratios = fidelity_ratios(rounds)
    print(f"{'metric':20s} {'ours (median)':>14s} {'vllm (median)':>14s} {'ours/vllm':>10s} {'95 % CI':>16s}")
    for key in SHOWN:
        mine = statistics.median(r["ours"][key] for r in rounds)
        reference = statistics.median(r["vllm"][key] for r in rounds)
        line = f"{key:20s} {mine:14.2f} {reference:14.2f}"
        if key in ratios:
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
