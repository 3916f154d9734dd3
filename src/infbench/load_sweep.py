"""The server stage's measurements: the study's API request (cold and warm) and the load
sweep, each level summarized with vLLM's result-JSON field names and checked for validity."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import openai

from infbench import study_figures
from infbench.arrivals import Arrivals
from infbench.load_checks import open_loop_rates, validity_checks
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


@dataclass(frozen=True)
class Level:
    """One load level: closed loop (`concurrency` in flight, no arrivals) or open loop
    (requests sent on `arrivals`, at most `concurrency` in flight where it is given)."""

    concurrency: int | None
    arrivals: Arrivals | None = None

    @property
    def mode(self) -> str:
        if self.arrivals is None:
            return "concurrency"
        return "request_rate" if self.arrivals.ramp_to is None else "ramp"

    @property
    def label(self) -> str:
        if self.arrivals is None:
            return f"concurrency {self.concurrency}"
        rate = f"{self.arrivals.rate}" + (f"->{self.arrivals.ramp_to}" if self.arrivals.ramp_to is not None else "")
        return f"rate {rate} req/s" + (f", at most {self.concurrency} in flight" if self.concurrency else "")


def configured_levels(load: dict) -> list[Level]:
    """The closed-loop levels, then the open-loop ones, then the ramp, as the config lists them."""
    levels = [Level(concurrency) for concurrency in load["concurrency"]]
    levels += [Level(load["max_concurrency"], Arrivals(rate, load["burstiness"])) for rate in load["request_rates"]]
    if load["ramp"]:
        ramp = Arrivals(load["ramp"]["start_rate"], load["burstiness"], load["ramp"]["end_rate"])
        levels.append(Level(load["max_concurrency"], ramp))
    return levels


def summarize_level(
    run: LevelRun,
    requests,
    *,
    level: Level,
    slo_ms: dict,
    tokenizer,
    prefix_caching: bool,
) -> dict:
    results = [s.result for s in run.results]
    summary = aggregate(results, run.duration_s)
    preemptions = run.metrics.first_last("vllm:num_preemptions_total")
    rates = open_loop_rates(run) or {}
    arrivals = level.arrivals
    summary.update(
        {
            "mode": level.mode,
            "max_concurrency": level.concurrency,
            "request_rate": arrivals.rate if arrivals is not None else "inf",
            "ramp_end_rate": arrivals.ramp_to if arrivals is not None else None,
            "burstiness": arrivals.burstiness if arrivals is not None else None,
            "offered_request_rate": rates.get("offered"),
            "sent_request_rate": rates.get("sent"),
            "achieved_request_rate": rates.get("achieved"),
            "request_goodput": goodput(results, run.duration_s, slo_ms) if slo_ms else None,
            "client_cpu_s": run.client_cpu_s,
            "peak_kv_cache_usage_perc": run.metrics.peak("vllm:kv_cache_usage_perc"),
            "peak_num_requests_running": run.metrics.peak("vllm:num_requests_running"),
            "peak_num_requests_waiting": run.metrics.peak("vllm:num_requests_waiting"),
            "preemptions": preemptions[1] - preemptions[0],
            "checks": validity_checks(run, requests, tokenizer, prefix_caching),
            "metrics_series": run.metrics.samples,
            "requests": [{**s.result.to_json(), "sent_s": s.sent_at - run.started} for s in run.results],
        }
    )
    return summary


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
    summaries = []
    for level in configured_levels(load):
        label = level.label
        run = asyncio.run(
            run_level(
                server.base_url,
                server.served_name,
                requests,
                concurrency=level.concurrency,
                arrivals=level.arrivals,
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
            level=level,
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
