"""The load client checked against vLLM's own: `vllm bench serve` (`vllm.benchmarks.serve`)
and this pipeline's client take turns on one server, with the same prompts in the same order,
the same output lengths and the same concurrency, in alternating rounds so that the machine's
drift hits both alike. Each figure is compared as the ratio ours / vLLM's, paired by round."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

from infbench.core.artifacts import read_json
from infbench.core.checks import check, passes
from infbench.core.metrics import aggregate
from infbench.core.stats import paired_ratio
from infbench.engines.servers import ServerSpec, start_server
from infbench.engines.settings import place_client
from infbench.serving.client import LoadRequest, run_level

COMPARED = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms")
# Scalars kept from each run's result (vLLM's result file also holds per-request lists).
KEPT = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "median_e2el_ms",
    "client_cpu_s",
)
# The file name vLLM's client saves its result under, in the result folder it is given.
VLLM_RESULT = "vllm_bench.json"
# The bar: a client whose figures sit within 5 % of vLLM's.
TOLERANCE = 0.05


def write_dataset(requests: list[LoadRequest], path: Path, api: str = "completions") -> None:
    """The requests as vLLM's `custom` dataset: one {prompt, output_tokens} object per line. For
    chat, the prompt is the user turn, which vLLM's openai-chat backend sends as the one message,
    as our client sends it."""
    rows = [
        {"prompt": r.messages[-1]["content"] if api == "chat" else r.prompt, "output_tokens": r.max_tokens}
        for r in requests
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def vllm_bench_arguments(
    *,
    base_url: str,
    served_name: str,
    tokenizer_dir: Path,
    dataset: Path,
    count: int,
    concurrency: int,
    seed: int,
    result_dir: Path,
    api: str = "completions",
) -> list[str]:
    """`vllm bench serve` flags for the same work our client does: the same API (completions, or
    chat where the server applies the template), streamed, greedy, exact output lengths
    (ignore_eos), the dataset in file order, no chat template applied by the client."""
    backend, endpoint = ("openai-chat", "/v1/chat/completions") if api == "chat" else ("openai", "/v1/completions")
    return [
        "--backend", backend,
        "--base-url", base_url,
        "--endpoint", endpoint,
        "--model", served_name,
        "--tokenizer", str(tokenizer_dir),
        "--dataset-name", "custom",
        "--dataset-path", str(dataset),
        "--custom-output-len", "-1",
        "--skip-chat-template",
        "--disable-shuffle",
        "--num-prompts", str(count),
        "--max-concurrency", str(concurrency),
        "--ignore-eos",
        "--temperature", "0",
        "--seed", str(seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--disable-tqdm",
        "--save-result",
        "--result-dir", str(result_dir),
        "--result-filename", VLLM_RESULT,
    ]  # fmt: skip


def run_vllm_bench(arguments: list[str], result_dir: Path) -> dict:
    """One run of vLLM's benchmark client in this process, and its result file's scalars."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    cpu_started = time.process_time()
    main(parser.parse_args(arguments))
    cpu_s = time.process_time() - cpu_started
    result = read_json(result_dir / VLLM_RESULT)
    return {**{key: result[key] for key in KEPT if key in result}, "client_cpu_s": cpu_s}


def run_ours(
    *,
    base_url: str,
    served_name: str,
    requests: list[LoadRequest],
    concurrency: int,
    seed: int,
    interval_s: float,
    timeout_s: float,
    api: str = "completions",
) -> dict:
    """One closed-loop pass of this pipeline's client, after one untimed request (as vLLM's
    client sends one before it starts timing)."""

    def one_pass(batch):
        return asyncio.run(
            run_level(
                base_url, served_name, batch, concurrency=concurrency, arrivals=None, seed=seed,
                interval_s=interval_s, timeout_s=timeout_s, api=api,
            )
        )  # fmt: skip

    one_pass(requests[:1])
    run = one_pass(requests)
    summary = aggregate([s.result for s in run.results], run.duration_s)
    return {**{key: summary[key] for key in KEPT if key in summary}, "client_cpu_s": run.client_cpu_s}


def alternate(ours, theirs, rounds: int, progress=print) -> list[dict]:
    """`rounds` rounds, each client once per round, who goes first alternating."""
    records = []
    for index in range(rounds):
        order = ("ours", "vllm") if index % 2 == 0 else ("vllm", "ours")
        record = {"round": index + 1, "order": list(order)}
        for client in order:
            record[client] = ours() if client == "ours" else theirs()
        records.append(record)
        progress(
            f"round {index + 1}/{rounds}: output tok/s ours {record['ours']['output_throughput']:.1f}, "
            f"vLLM's {record['vllm']['output_throughput']:.1f}"
        )
    return records


def measure_client_fidelity(
    spec: ServerSpec,
    log_path: str | Path,
    requests: list[LoadRequest],
    *,
    concurrency: int,
    rounds: int,
    interval_s: float,
    timeout_s: float,
    api: str = "completions",
) -> dict:
    """On a fresh server of `spec`, let both clients take turns with `requests` (`rounds` each,
    alternating). Returns the rounds, vLLM's arguments, where the
    client ran, and vLLM's own result file of the last round as text."""
    with tempfile.TemporaryDirectory() as scratch, start_server(spec, log_path) as server:
        scratch = Path(scratch)
        placement = place_client(spec.threads, spec.device)
        print(f"measuring {server.base_url}; {placement['note']}")
        dataset = scratch / "prompts.jsonl"
        write_dataset(requests, dataset, api)
        arguments = vllm_bench_arguments(
            base_url=server.base_url,
            served_name=server.served_name,
            tokenizer_dir=Path(spec.model_dir),
            dataset=dataset,
            count=len(requests),
            concurrency=concurrency,
            seed=spec.seed,
            result_dir=scratch,
            api=api,
        )
        measured = alternate(
            lambda: run_ours(
                base_url=server.base_url,
                served_name=server.served_name,
                requests=requests,
                concurrency=concurrency,
                seed=spec.seed,
                interval_s=interval_s,
                timeout_s=timeout_s,
                api=api,
            ),
            lambda: run_vllm_bench(arguments, scratch),
            rounds,
        )
        vllm_result = (scratch / VLLM_RESULT).read_text()
    return {"rounds": measured, "arguments": arguments, "placement": placement, "vllm_result": vllm_result}


def fidelity_ratios(rounds: list[dict]) -> dict:
    """Per compared figure, ours / vLLM's: the geometric mean of the per-round ratios with a
    paired 95 % interval (stats.paired_ratio), and each round's ratio. A figure that is not
    above zero in some round has no ratio (`no_ratio` says where): a median ITL of 0 ms, say,
    when most of a round's chunks arrived in one read and share its timestamp."""
    ratios = {}
    for key in COMPARED:
        ours = [r["ours"][key] for r in rounds]
        theirs = [r["vllm"][key] for r in rounds]
        zero = [
            f"round {r['round']}: ours {a:g}, vLLM's {b:g}"
            for r, a, b in zip(rounds, ours, theirs)
            if not (a > 0 and b > 0)  # NaN too
        ]
        if zero:
            ratios[key] = {
                "ratio": None,
                "ci95_low": None,
                "ci95_high": None,
                "round_ratios": [a / b if a > 0 and b > 0 else None for a, b in zip(ours, theirs)],
                "no_ratio": "not above zero in " + "; ".join(zero),
            }
            continue
        ratios[key] = {**paired_ratio(ours, theirs), "round_ratios": [a / b for a, b in zip(ours, theirs)]}
    return ratios


def fidelity_checks(rounds: list[dict], ratios: dict) -> list[dict]:
    """Both clients did the same work; each ratio's interval lies within 1 +- TOLERANCE (pass),
    straddles its edge (warn: not resolved by these rounds), or lies wholly outside (fail)."""
    mismatched = [
        r["round"]
        for r in rounds
        if (r["ours"]["completed"], r["ours"]["total_output_tokens"])
        != (r["vllm"]["completed"], r["vllm"]["total_output_tokens"])
    ]
    checks = [
        check(
            "clients_did_the_same_work",
            passes(not mismatched),
            len(mismatched),
            f"completed requests and output tokens differ between the clients in rounds {mismatched}"
            if mismatched
            else "both clients completed the same requests and output tokens each round",
        )
    ]
    low, high = 1 - TOLERANCE, 1 + TOLERANCE
    for key, ratio in ratios.items():
        if ratio["ratio"] is None:
            checks.append(
                check(
                    f"client_fidelity_{key}",
                    "warn",
                    None,
                    f"ours / vLLM's {key}: no ratio, the figure is {ratio['no_ratio']}; a figure this close to "
                    "zero cannot tell the clients apart (longer outputs or a slower model can)",
                )
            )
            continue
        interval = (ratio["ci95_low"], ratio["ci95_high"])
        inside = low <= interval[0] and interval[1] <= high
        outside = interval[1] < low or interval[0] > high
        status = "pass" if inside else "fail" if outside else "warn"
        checks.append(
            check(
                f"client_fidelity_{key}",
                status,
                ratio["ratio"],
                f"ours / vLLM's {key}: {ratio['ratio']:.3f} [{interval[0]:.3f}, {interval[1]:.3f}] over "
                f"{len(rounds)} rounds; within {low:.2f}-{high:.2f} passes, wholly outside fails, "
                "across the edge is not resolved (more client_fidelity.rounds)",
            )
        )
    return checks
