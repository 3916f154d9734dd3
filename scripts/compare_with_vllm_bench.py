"""Benchmark: this pipeline's load client beside vLLM's own `vllm bench serve` client, against
one server, with the same prompts and output lengths, alternating rounds so the machine's
noise hits both alike. Prints medians per client and ours / vLLM's ratios.

    python scripts/compare_with_vllm_bench.py --model-dir resources/models/smollm2-135m-instruct \
        --workload results/smollm2-135m-instruct/workload.jsonl --concurrency 4 --requests 32 --rounds 3
"""

import argparse
import asyncio
import json
import statistics
import tempfile
from pathlib import Path

from infbench.artifacts import read_json, read_jsonl
from infbench.engine_settings import engine_env, vllm_engine_args
from infbench.hardware import resolve_dtype
from infbench.load_client import cycle_requests, run_level
from infbench.metrics import aggregate
from infbench.vllm_server import VLLMServer

METRICS = (
    "output_throughput",
    "request_throughput",
    "median_ttft_ms",
    "median_tpot_ms",
    "median_itl_ms",
    "median_e2el_ms",
    "p99_ttft_ms",
    "p99_e2el_ms",
)


def ours(server, requests, concurrency, seed):
    run = asyncio.run(
        run_level(
            server.base_url,
            server.served_name,
            requests,
            concurrency=concurrency,
            arrivals=None,
            seed=seed,
            interval_s=5.0,
            timeout_s=600,
        )
    )
    return aggregate([s.result for s in run.results], run.duration_s)


def theirs(server, dataset, tokenizer_dir, count, concurrency, seed, out_dir):
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(
        [
            "--backend",
            "openai",
            "--base-url",
            server.base_url,
            "--endpoint",
            "/v1/completions",
            "--model",
            server.served_name,
            "--tokenizer",
            str(tokenizer_dir),
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(dataset),
            "--custom-output-len",
            "-1",
            "--skip-chat-template",
            "--num-prompts",
            str(count),
            "--max-concurrency",
            str(concurrency),
            "--ignore-eos",
            "--temperature",
            "0",
            "--seed",
            str(seed),
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--metric-percentiles",
            "50,99",
            "--disable-tqdm",
            "--save-result",
            "--result-dir",
            str(out_dir),
            "--result-filename",
            "vllm.json",
        ]
    )
    main(args)
    return read_json(Path(out_dir) / "vllm.json")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()

    model_dir = Path(options.model_dir).resolve()
    requests = cycle_requests(read_jsonl(options.workload), options.requests)
    engine = {"max_model_len": 512, "kv_cache_gib": 1.0, "block_size": 128, "enable_prefix_caching": False}
    args = vllm_engine_args(model_dir, resolve_dtype("auto", "cpu"), engine, options.seed, "cpu")
    with tempfile.TemporaryDirectory() as scratch:
        dataset = Path(scratch) / "prompts.jsonl"
        dataset.write_text(
            "".join(json.dumps({"prompt": r.prompt, "output_tokens": r.max_tokens}) + "\n" for r in requests)
        )
        results = {"ours": [], "vllm": []}
        with VLLMServer(args, "model", Path(scratch) / "server.log", env=engine_env(options.threads, "cpu")) as server:
            ours(server, requests[: options.concurrency], options.concurrency, options.seed)  # warm-up
            for round_index in range(options.rounds):
                order = ("ours", "vllm") if round_index % 2 == 0 else ("vllm", "ours")
                for client in order:
                    if client == "ours":
                        results["ours"].append(ours(server, requests, options.concurrency, options.seed))
                    else:
                        results["vllm"].append(
                            theirs(
                                server, dataset, model_dir, options.requests, options.concurrency, options.seed, scratch
                            )
                        )
    print(f"{'metric':22s} {'ours (median)':>14s} {'vllm (median)':>14s} {'ours/vllm':>10s}")
    for metric in METRICS:
        mine = statistics.median(r[metric] for r in results["ours"])
        reference = statistics.median(r[metric] for r in results["vllm"])
        print(f"{metric:22s} {mine:14.2f} {reference:14.2f} {mine / reference:10.3f}")
    tokens = {name: [r["total_output_tokens"] for r in rs] for name, rs in results.items()}
    print(f"total output tokens per round: {tokens}")


if __name__ == "__main__":
    main()
