"""The serving stage: the study's API request (cold and warm) and the load sweep, each level
summarized with vLLM's result-JSON field names and checked for validity."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai

from infbench import study
from infbench.loadgen import LevelRun, cycle_requests, run_level
from infbench.metrics import aggregate, goodput
from infbench.server import ServerError, VLLMServer
from infbench.stats import summarize

CLIENT_CPU_WARN = 0.8  # share of one core the client may use before its timing is suspect
DISPATCH_LAG_WARN_S = 0.05


def server_kv_facts(base_url: str) -> dict:
    """The engine's KV-cache facts from the `vllm:cache_config_info` metric's labels."""
    text = httpx.get(f"{base_url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1:line.rindex("}")].split('",'))
            labels = {key.strip(): value.strip('"') for key, value in labels.items()}
            return {
                "num_blocks": int(labels["num_gpu_blocks"]),
                "block_size": int(labels["block_size"]),
                "kv_capacity_tokens": int(labels.get("kv_cache_size_tokens", 0)) or None,
                "max_concurrency_at_max_model_len": float(labels["kv_cache_max_concurrency"])
                if "kv_cache_max_concurrency" in labels else None,
                "prefix_caching": labels.get("enable_prefix_caching") == "True",
            }
    raise ServerError("the server's /metrics has no vllm:cache_config_info; is this a vLLM server?")


def study_request(base_url: str, model: str, prompt: str, warm_requests: int, seed: int, timeout_s: float) -> dict:
    """The study's part 5 as it did it (non-streamed, 50 tokens, temperature 0.7), cold then warm."""
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="not-needed", max_retries=0, timeout=timeout_s)
    calls = []
    for _ in range(1 + warm_requests):
        started = time.perf_counter()
        response = client.completions.create(model=model, prompt=prompt, max_tokens=50, temperature=0.7, seed=seed)
        calls.append({"latency_s": time.perf_counter() - started, "prompt_tokens": response.usage.prompt_tokens,
                      "completion_tokens": response.usage.completion_tokens, "text": response.choices[0].text})
    client.close()
    warm = calls[1:]
    return {"prompt": prompt, "max_tokens": 50, "temperature": 0.7, "cold": calls[0], "warm": warm,
            "warm_latency_s": summarize(c["latency_s"] for c in warm).to_json() if len(warm) > 1 else None,
            "study": study.SERVER}


def check(name: str, status: str, value, detail: str) -> dict:
    return {"name": name, "status": status, "value": value, "detail": detail}


def validity_checks(run: LevelRun, requests, tokenizer, request_rate: float | None, prefix_caching: bool) -> list[dict]:
    results = [s.result for s in run.results]
    failed = sum(not r.success for r in results)
    checks = [check("failed_requests", "fail" if failed else "pass", failed,
                    f"{failed} of {len(results)} requests failed")]
    done = [s for s in run.results if s.result.success]
    asked = {r.id: r.max_tokens for r in requests}
    short = sum(s.result.output_tokens < asked[s.result.request_id] for s in done)
    checks.append(check("short_outputs", "fail" if short else "pass", short,
                        f"{short} outputs shorter than their max_tokens (ignore_eos should prevent it)"))
    if tokenizer is not None and done:
        diffs = [abs(len(tokenizer(s.text, add_special_tokens=False)["input_ids"]) - s.result.output_tokens) for s in done]
        mean_diff = sum(diffs) / len(diffs)
        checks.append(check("usage_vs_retokenized", "pass" if mean_diff <= 1 else "warn", mean_diff,
                            f"mean |re-tokenized text - usage.completion_tokens| = {mean_diff:.2f} tokens; usage is "
                            "what the metrics use (text re-tokenizes differently at merges)"))
    cpu_share = run.client_cpu_s / run.duration_s
    checks.append(check("client_cpu", "warn" if cpu_share > CLIENT_CPU_WARN else "pass", cpu_share,
                        f"the client used {cpu_share:.0%} of a core; above {CLIENT_CPU_WARN:.0%} its own delays "
                        "inflate latencies"))
    if request_rate is not None and len(done) > 1:
        # Rates over the sample itself: (n - 1) / span of sends vs of completions. A server that
        # keeps up completes requests as fast as they were sent; completed / duration would
        # read low even then, because the duration includes the last request's own latency.
        sends = sorted(s.sent_at for s in run.results)
        completions = sorted(s.sent_at + s.result.e2el for s in done)
        offered = (len(sends) - 1) / (sends[-1] - sends[0])
        achieved = (len(completions) - 1) / (completions[-1] - completions[0])
        lag = max((s.sent_at - run.results[0].sent_at) - (when - run.scheduled[0])
                  for s, when in zip(run.results, run.scheduled))
        checks.append(check("achieved_vs_offered_rate", "pass" if achieved >= 0.9 * offered else "warn",
                            achieved / offered,
                            f"completions came at {achieved:.2f} req/s for {offered:.2f} req/s sent "
                            f"({request_rate:.2f} configured); below 90 % the server is saturated and queueing "
                            "dominates latency"))
        checks.append(check("dispatch_lag", "pass" if lag <= DISPATCH_LAG_WARN_S else "warn", lag,
                            f"requests left the client up to {lag * 1000:.0f} ms after their scheduled time"))
    busy = [sample for sample in run.metrics.samples if sample.get("vllm:num_requests_running", 0) > 0]
    checks.append(check("metrics_coverage", "pass" if len(busy) >= 2 else "warn", len(busy),
                        f"{len(busy)} /metrics samples caught requests running during this {run.duration_s:.1f} s "
                        "level; with fewer than 2 the server-state figures miss the level: lower "
                        "load.metrics_interval_s or raise load.requests_per_level"))
    queries = run.metrics.first_last("vllm:prefix_cache_queries_total")
    hits = run.metrics.first_last("vllm:prefix_cache_hits_total")
    asked_tokens = queries[1] - queries[0]
    hit_rate = (hits[1] - hits[0]) / asked_tokens if asked_tokens else 0.0
    flattering = hit_rate > 0.1
    checks.append(check("prefix_cache_hit_rate", "warn" if flattering else "pass", hit_rate,
                        f"prefix-cache hit rate {hit_rate:.0%} (prefix caching {'on' if prefix_caching else 'off'}); "
                        "a high rate means repeated prompts skip prefill and flatter TTFT"))
    return checks


def summarize_level(run: LevelRun, requests, *, concurrency: int | None, request_rate: float | None,
                    slo_ms: dict, tokenizer, prefix_caching: bool) -> dict:
    results = [s.result for s in run.results]
    level = aggregate(results, run.duration_s)
    preemptions = run.metrics.first_last("vllm:num_preemptions_total")
    level.update({
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
    })
    return level


def run_sweep(server: VLLMServer, workload: list[dict], load: dict, seed: int, timeout_s: float, tokenizer,
              prefix_caching: bool, progress=print) -> list[dict]:
    """Every configured level against a running server; stops at the first level the server
    does not survive (its failed requests are in the error)."""
    requests = cycle_requests(workload, load["requests_per_level"])
    levels = [(c, None) for c in load["concurrency"]] + [(None, r) for r in load["request_rates"]]
    summaries = []
    for concurrency, rate in levels:
        label = f"concurrency {concurrency}" if rate is None else f"rate {rate} req/s"
        run = asyncio.run(run_level(server.base_url, server.served_name, requests, concurrency=concurrency,
                                    request_rate=rate, seed=seed, interval_s=load["metrics_interval_s"],
                                    timeout_s=timeout_s))
        failed = sum(not s.result.success for s in run.results)
        if not server.alive():
            raise ServerError(f"the vLLM server died during the load level {label}: {failed} of {len(requests)} "
                              f"requests failed; see {server.log_path}:\n{server.log_tail()}")
        summary = summarize_level(run, requests, concurrency=concurrency, request_rate=rate,
                                  slo_ms=load["slo_ms"], tokenizer=tokenizer, prefix_caching=prefix_caching)
        progress(f"{label}: {summary['output_throughput']:.1f} output tok/s, median TTFT "
                 f"{summary['median_ttft_ms']:.0f} ms, median TPOT {summary['median_tpot_ms']:.1f} ms, "
                 f"{failed} failed")
        summaries.append(summary)
    return summaries


def grid_cells(grid: dict) -> list[dict]:
    """Every combination of the grid's settings (max_num_seqs, max_num_batched_tokens, kv_cache_gib)."""
    import itertools

    keys = sorted(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[key] for key in keys))]


def run_tuning(engine_args: dict, served_name: str, env: dict, log_dir, workload: list[dict], tuning: dict,
               server_settings: dict, load: dict, seed: int, tokenizer, prefix_caching: bool, progress=print) -> list[dict]:
    """One server start per grid cell, each under the same saturating closed-loop load."""
    from infbench.engines import kv_cache_bytes

    requests = cycle_requests(workload, tuning["requests"])
    cells = []
    for index, cell in enumerate(grid_cells(tuning["grid"])):
        args = dict(engine_args)
        if "kv_cache_gib" in cell:
            args["kv_cache_memory_bytes"] = kv_cache_bytes(cell["kv_cache_gib"])
        extra = {key: value for key, value in cell.items() if key != "kv_cache_gib"}
        with VLLMServer(args, served_name, f"{log_dir}/cell-{index}.log", env=env, extra_args=extra,
                        startup_timeout_s=server_settings["startup_timeout_s"]) as server:
            kv = server_kv_facts(server.base_url)
            run = asyncio.run(run_level(server.base_url, served_name, requests, concurrency=tuning["concurrency"],
                                        request_rate=None, seed=seed, interval_s=load["metrics_interval_s"],
                                        timeout_s=server_settings["request_timeout_s"]))
            if not server.alive():
                raise ServerError(f"the vLLM server died in tuning cell {cell}; see {server.log_path}")
        level = summarize_level(run, requests, concurrency=tuning["concurrency"], request_rate=None,
                                slo_ms=load["slo_ms"], tokenizer=tokenizer, prefix_caching=prefix_caching)
        level.pop("requests")
        cells.append({"settings": cell, "kv": kv, "startup_s": server.startup_s, **level})
        progress(f"tuning {cell}: {level['output_throughput']:.1f} output tok/s, "
                 f"peak waiting {level['peak_num_requests_waiting']:.0f}, preemptions {level['preemptions']:.0f}")
    return cells
