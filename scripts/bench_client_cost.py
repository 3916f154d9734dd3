"""Benchmark: what this pipeline's load client costs beside vLLM's benchmark client, on the
reference server (infbench.serving.reference_server: it answers at once and streams a token
every 5 ms, so neither client waits on an engine). Each round runs both clients, who goes
first alternating, through the same three phases (infbench.serving.client_cost): one request
at a time with one output token, then `--requests` requests of `--output-tokens` tokens and
of five times as many, `--concurrency` in flight. Prints each client's medians over rounds and
ours / vLLM's with a paired 95 % interval:

    CPU per chunk, all   the shorter stream phase's CPU seconds over its chunks
    CPU per chunk, b     a chunk's own cost, from the two stream phases
    CPU per request, a   a request's own cost at that concurrency, its chunks aside
    first byte           the median TTFT each client measured in the first phase

    python scripts/bench_client_cost.py --rounds 10 --requests 64 --output-tokens 32 --concurrency 16

With `--processes 1 2 4`, it then measures what the client sustains spread over that many
processes (infbench.serving.client_processes): a closed loop of `--ceiling-concurrency`
requests in flight of `--output-tokens` x 5 tokens on a reference server that streams as fast
as it can, each process count once a round in alternating order; it prints the chunks a
second received, a worker's CPU share and the dispatching process's (medians over rounds). Where the reference
server's own process is the limit (it shares this machine's cores), more processes cannot
raise it: the CPU share says which side was busy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from pathlib import Path

from infbench.core.stats import paired_ratio
from infbench.serving.client import run_level
from infbench.serving.client_cost import MODEL, measure_round, ours, reference_server, requests_of, vllms
from infbench.serving.reference_server import ReferenceServer, Schedule

FIGURES = {
    "cpu_per_chunk_us": "CPU per chunk, all (us)",
    "cpu_per_chunk_b_us": "CPU per chunk, b (us)",
    "cpu_per_request_us": "CPU per request, a (us)",
    "first_byte_ms": "first byte (ms)",
}


def figures(phases, cost) -> dict:
    short = phases[1]
    return {
        "cpu_per_chunk_us": short.cpu_s / short.chunks * 1e6,
        "cpu_per_chunk_b_us": cost.cpu_per_chunk_s * 1e6,
        "cpu_per_request_us": cost.cpu_per_request_s * 1e6,
        "first_byte_ms": cost.first_byte_ms,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--processes", type=int, nargs="*", default=[], help="client process counts to compare")
    parser.add_argument("--ceiling-concurrency", type=int, default=64)
    parser.add_argument("--json", help="write every round's figures here")
    options = parser.parse_args()
    clients = {"ours": ours, "vllm": vllms}
    rounds = []
    with tempfile.TemporaryDirectory() as scratch, reference_server(Path(scratch) / "server.log") as server:
        for index in range(options.rounds):
            order = ("ours", "vllm") if index % 2 == 0 else ("vllm", "ours")
            record = {}
            for name in order:
                measured = measure_round(
                    clients[name], server.base_url, requests=options.requests,
                    output_tokens=options.output_tokens, concurrency=options.concurrency,
                )  # fmt: skip
                record[name] = figures(*measured)
            rounds.append(record)
            print(
                f"round {index + 1}/{options.rounds}: CPU per chunk ours {record['ours']['cpu_per_chunk_us']:.1f} us, "
                f"vLLM's {record['vllm']['cpu_per_chunk_us']:.1f} us",
                flush=True,
            )
    print(f"\n{'figure':26s} {'ours (median)':>14s} {'vllm (median)':>14s} {'ours/vllm':>10s} {'95 % CI':>16s}")
    for key, label in FIGURES.items():
        mine = [r["ours"][key] for r in rounds]
        theirs = [r["vllm"][key] for r in rounds]
        ratio = paired_ratio(mine, theirs)
        print(
            f"{label:26s} {statistics.median(mine):14.2f} {statistics.median(theirs):14.2f} "
            f"{ratio['ratio']:10.3f}   [{ratio['ci95_low']:.3f}, {ratio['ci95_high']:.3f}]"
        )
    spread = ceiling_rounds(options) if options.processes else []
    if options.json:
        Path(options.json).write_text(
            json.dumps({"options": vars(options), "rounds": rounds, "processes": spread}, indent=1)
        )


def ceiling_rounds(options) -> list[dict]:
    """Each process count once a round, order alternating: chunks/s and CPU share a process."""
    requests = requests_of(options.requests, 5 * options.output_tokens)
    measured = []
    schedule = Schedule(ttft_ms=0.0, itl_ms=0.0, max_num_seqs=1024, num_blocks=1 << 20)
    with tempfile.TemporaryDirectory() as scratch, ReferenceServer(MODEL, Path(scratch) / "s.log", schedule) as server:
        for index in range(options.rounds):
            for processes in options.processes[:: 1 if index % 2 == 0 else -1]:
                run = asyncio.run(
                    run_level(
                        server.base_url, MODEL, requests, concurrency=options.ceiling_concurrency, arrivals=None,
                        seed=0, interval_s=1.0, timeout_s=600, scrape_metrics=False, processes=processes,
                    )
                )  # fmt: skip
                chunks = sum(len(s.result.itl) + 1 for s in run.results if s.result.success)
                measured.append(
                    {
                        "processes": processes,
                        "chunks_per_s": chunks / run.duration_s,
                        # The workers' shares (one process: its own), then the calling process's dispatching.
                        "worker_cpu_share": statistics.mean((run.process_cpu_s or [run.client_cpu_s])[: run.processes])
                        / run.duration_s,
                        "dispatcher_cpu_share": run.process_cpu_s[-1] / run.duration_s if run.process_cpu_s else 0.0,
                    }
                )
    print(f"\n{'processes':>9s} {'chunks/s (median)':>18s} {'CPU share a worker':>19s} {'dispatcher':>11s}")
    for processes in options.processes:
        mine = [m for m in measured if m["processes"] == processes]
        print(
            f"{processes:9d} {statistics.median(m['chunks_per_s'] for m in mine):18.0f} "
            f"{statistics.median(m['worker_cpu_share'] for m in mine):19.2f} "
            f"{statistics.median(m['dispatcher_cpu_share'] for m in mine):11.2f}"
        )
    return measured


if __name__ == "__main__":
    main()
