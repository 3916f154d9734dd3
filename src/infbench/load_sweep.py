"""The server stage's measurements: the study's API request (cold and warm) and the load
sweep, each level summarized with vLLM's result-JSON field names and checked for validity."""

from __future__ import annotations

import asyncio
import time

import openai

from infbench import study_figures
from infbench.load_checks import validity_checks
from infbench.load_client import LevelRun, cycle_requests, run_level
from infbench.metrics import aggregate, goodput
from infbench.stats import summarize
from infbench.vllm_server import ServerError, VLLMServer


def study_request(*, base_url: str, model: str, prompt: str, warm_requests: int, seed: int, timeout_s: float) -> dict:
    """The study's part 5 as it did it (non-streamed, 50 tokens, temperature 0.7), cold then warm."""
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="not-needed", max_retries=0, timeout=timeout_s)
    calls = []
    for _ in range(1 + warm_requests):
        started = time.perf_counter()
        response = client.completions.create(model=model, prompt=prompt, max_tokens=50, temperature=0.7, seed=seed)
        calls.append(
            {
                "latency_s": time.perf_counter() - started,
                "prompt_tokens": response.usage.prompt_tokens,
                "completion_tokens": response.usage.completion_tokens,
                "text": response.choices[0].text,
            }
        )
    client.close()
    warm = calls[1:]
    return {
        "prompt": prompt,
        "max_tokens": 50,
        "temperature": 0.7,
        "cold": calls[0],
        "warm": warm,
        "warm_latency_s": summarize(c["latency_s"] for c in warm).to_json() if len(warm) > 1 else None,
        "study": study_figures.SERVER,
    }


def summarize_level(
    run: LevelRun,
    requests,
    *,
    concurrency: int | None,
    request_rate: float | None,
    slo_ms: dict,
    tokenizer,
    prefix_caching: bool,
) -> dict:
    results = [s.result for s in run.results]
    level = aggregate(results, run.duration_s)
    preemptions = run.metrics.first_last("vllm:num_preemptions_total")
    level.update(
        {
            "mode": "concurrency" if request_rate is None else "request_rate",
            "max_concurrency": concurrency,
            "request_rate": request_rate if request_rate is not None else "inf",
            "request_goodput": goodput(results, run.duration_s, slo_ms) if slo_ms else None,
            "client_cpu_s": run.client_cpu_s,
            "peak_kv_cache_usage_perc": run.metrics.peak("vllm:kv_cache_usage_perc"),
            "peak_num_requests_running": run.metrics.peak("vllm:num_requests_running"),
            "peak_num_requests_waiting": run.metrics.peak("vllm:num_requests_waiting"),
            "preemptions": preemptions[1] - preemptions[0],
            "checks": validity_checks(run, requests, tokenizer, request_rate, prefix_caching),
            "metrics_series": run.metrics.samples,
            "requests": [s.result.to_json() for s in run.results],
        }
    )
    return level


def run_sweep(
    *,
    server: VLLMServer,
    workload: list[dict],
    load: dict,
    seed: int,
    timeout_s: float,
    tokenizer,
    prefix_caching: bool,
    progress=print,
) -> list[dict]:
    """Every configured level against a running server; stops at the first level the server
    does not survive (its failed requests are in the error)."""
    requests = cycle_requests(workload, load["requests_per_level"])
    levels = [(c, None) for c in load["concurrency"]] + [(None, r) for r in load["request_rates"]]
    summaries = []
    for concurrency, rate in levels:
        label = f"concurrency {concurrency}" if rate is None else f"rate {rate} req/s"
        run = asyncio.run(
            run_level(
                server.base_url,
                server.served_name,
                requests,
                concurrency=concurrency,
                request_rate=rate,
                seed=seed,
                interval_s=load["metrics_interval_s"],
                timeout_s=timeout_s,
            )
        )
        failed = sum(not s.result.success for s in run.results)
        if not server.alive():
            raise ServerError(
                f"the vLLM server died during the load level {label}: {failed} of {len(requests)} "
                f"requests failed; see {server.log_path}:\n{server.log_tail()}"
            )
        summary = summarize_level(
            run,
            requests,
            concurrency=concurrency,
            request_rate=rate,
            slo_ms=load["slo_ms"],
            tokenizer=tokenizer,
            prefix_caching=prefix_caching,
        )
        progress(
            f"{label}: {summary['output_throughput']:.1f} output tok/s, median TTFT "
            f"{summary['median_ttft_ms']:.0f} ms, median TPOT {summary['median_tpot_ms']:.1f} ms, "
            f"{failed} failed"
        )
        summaries.append(summary)
    return summaries
