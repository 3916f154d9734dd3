"""The server stage's measurements: the study's API request (cold and warm) and the load
sweep, each level summarized with vLLM's result-JSON field names and checked for validity."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass, replace

import openai

from infbench.core import study_figures
from infbench.core.checks import STATUS_RANK, check
from infbench.core.metrics import MS, PERCENTILES, aggregate, distribution, failures_by_cause, goodput, meets_slo
from infbench.core.stats import median_interval, percentile_needs, summarize
from infbench.engines.external_endpoint import ExternalEndpoint
from infbench.engines.server_metrics import MetricsSeries
from infbench.engines.vllm_server import ServerError, VLLMServer
from infbench.serving.arrivals import Arrivals, TraceArrivals, replayable, workload_trace
from infbench.serving.client import (
    LevelRun,
    LoadRequest,
    cycle_requests,
    load_request,
    run_level,
    trace_requests,
    unix_time,
)
from infbench.serving.client_cost import ClientCost
from infbench.serving.level_checks import (
    client_rates,
    open_loop_rates,
    processes_needed,
    session_checks,
    validity_checks,
)
from infbench.serving.sessions import SessionPlan, pooled_session_figures, session_figures
from infbench.serving.time_breakdown import breakdown, pass_totals, pooled_totals
from infbench.serving.window import (
    RequestSupply,
    Window,
    ensure_alive,
    level_run,
    measure_pass,
    streamed_record,
    whole_sessions_run,
    window_processes,
)
from infbench.workload.requests import WARMUP_MAX_TOKENS, has_chat_template


def readable_completion(client: openai.OpenAI, url: str, **body):
    """A non-streamed completion the openai client could read, with a choice and usage; an
    endpoint's reply it cannot read ends the stage with one line naming that reply."""
    try:
        response = client.completions.create(**body)
    except openai.APIStatusError as error:
        raise ServerError(f"{url} answered the study's request: {error.message}") from None
    except openai.APIConnectionError as error:
        raise ServerError(f"{url} could not be reached for the study's request: {error}") from None
    except (openai.APIResponseValidationError, ValueError) as error:
        raise ServerError(
            f"{url} answered the study's request with a reply that is not a completion: {error}"
        ) from None
    if not isinstance(response, openai.types.Completion) or not response.choices or response.usage is None:
        raise ServerError(
            f"{url} answered the study's request without a choice and usage: {str(response)[:200]!r}; "
            "is it an OpenAI-compatible completions endpoint?"
        )
    return response


def study_request(
    *, base_url: str, model: str, prompt: str, warm_requests: int, seed: int, timeout_s: float, api_key=None
) -> dict:
    """The study's part 5 as it did it (non-streamed, 50 tokens, temperature 0.7), cold then warm."""
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key or "not-needed", max_retries=0, timeout=timeout_s)
    calls = []
    for _ in range(1 + warm_requests):
        started = time.perf_counter()
        response = readable_completion(
            client, f"{base_url}/v1/completions", model=model, prompt=prompt, max_tokens=50, temperature=0.7, seed=seed
        )
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
    """One load level: closed loop (`concurrency` in flight, no arrivals; with `users`, that
    many users in chat sessions) or open loop (requests sent on `arrivals`, at most
    `concurrency` in flight where it is given; with `users`, chat sessions starting on a ramp)."""

    concurrency: int | None
    arrivals: Arrivals | TraceArrivals | None = None
    api: str = "completions"  # or "chat": /v1/chat/completions, through the model's chat template
    users: bool = False

    @property
    def mode(self) -> str:
        if self.users:
            return "users" if self.arrivals is None else "session_ramp"
        if self.arrivals is None:
            return "concurrency"
        if isinstance(self.arrivals, TraceArrivals):
            return "trace"
        return "request_rate" if self.arrivals.ramp_to is None else "ramp"

    @property
    def windowed(self) -> bool:
        """Measured in a steady-state window (serving/window.py): a closed loop or a fixed rate.
        A ramp holds no load steady and a trace replays its own schedule: whole passes."""
        return self.mode in ("concurrency", "request_rate", "users")

    @property
    def label(self) -> str:
        if self.users and self.arrivals is not None:
            return f"chat sessions starting at {self.arrivals.rate:g}->{self.arrivals.ramp_to:g}/s"
        if self.users:
            return f"{self.concurrency} users in chat sessions"
        prefix = "chat, " if self.api == "chat" else ""
        if self.arrivals is None:
            return f"{prefix}concurrency {self.concurrency}"
        if isinstance(self.arrivals, TraceArrivals):
            cap = f", at most {self.concurrency} in flight" if self.concurrency else ""
            return f"{prefix}trace x{self.arrivals.scale:g} ({self.arrivals.rate:.2f} req/s){cap}"
        rate = f"{self.arrivals.rate}" + (f"->{self.arrivals.ramp_to}" if self.arrivals.ramp_to is not None else "")
        return f"{prefix}rate {rate} req/s" + (f", at most {self.concurrency} in flight" if self.concurrency else "")


def configured_levels(
    load: dict, api: str = "completions", chat_available: bool = True, trace: tuple[float, ...] = ()
) -> list[Level]:
    """The closed-loop levels, then the open-loop ones, then the ramp, as the config lists them,
    all through the workload's API; with a trace's arrival times (replayable), one replay a scale
    (load.trace_scales); then, for a completions workload of a model with a chat template, the
    closed-loop chat levels (load.chat_concurrency); then users in chat sessions (load.users), and
    sessions on a ramp (load.session_ramp)."""
    levels = [Level(concurrency, api=api) for concurrency in load["concurrency"]]
    levels += [
        Level(load["max_concurrency"], Arrivals(rate, load["burstiness"]), api) for rate in load["request_rates"]
    ]
    if load["ramp"]:
        ramp = Arrivals(load["ramp"]["start_rate"], load["burstiness"], load["ramp"]["end_rate"])
        levels.append(Level(load["max_concurrency"], ramp, api))
    if replayable(trace):
        levels += [Level(load["max_concurrency"], TraceArrivals(trace, scale), api) for scale in load["trace_scales"]]
    if api == "completions" and chat_available:
        levels += [Level(concurrency, api="chat") for concurrency in load["chat_concurrency"]]
    levels += [Level(users, api="chat", users=True) for users in load["users"]]
    if load["session_ramp"]:
        ramp = load["session_ramp"]
        levels.append(Level(None, Arrivals(ramp["start_rate"], load["burstiness"], ramp["end_rate"]), "chat", True))
    return levels


# Level figures summarized across repeats (mean and 95 % CI over the repeats' values).
ACROSS_REPEATS = (
    "output_throughput",
    "request_throughput",
    "median_ttft_ms",
    "median_tpot_ms",
    "median_itl_ms",
    "median_e2el_ms",
)
# Latencies whose per-repeat medians must agree within their intervals.
AGREEMENT_METRICS = ("ttft", "tpot")


def warmup_requests(requests: list[LoadRequest], level: Level) -> list[LoadRequest]:
    """Untimed requests before each pass of a level: the first k of `requests` (the workload's)
    sent together, k its cap on requests in flight (1 for an uncapped rate), outputs cut to
    WARMUP_MAX_TOKENS."""
    count = min(len(requests), level.concurrency or 1)
    return [replace(r, id=f"warmup-{r.id}", max_tokens=min(r.max_tokens, WARMUP_MAX_TOKENS)) for r in requests[:count]]


def windowed_throughput(runs: list[LevelRun], slo_ms: dict | None) -> dict:
    """Windowed passes' throughput, what the server delivered while their windows were open:

    request_throughput     = requests completed in the windows / their seconds
    output_throughput      = output tokens that arrived in the windows / their seconds
    total_token_throughput = (prompt tokens of those completed + those output tokens) / seconds
    request_goodput        = request_throughput x the share of counted requests within the SLO

    (counted requests / window would be the rate they were sent at, which an overloaded open
    loop keeps up whatever the server completes). {} for whole passes."""
    windows = [run.window for run in runs if run.window is not None]
    if not windows:
        return {}
    seconds = sum(w.seconds for w in windows)
    completed = sum(w.completed for w in windows)
    output = sum(w.output_tokens for w in windows)
    counted = [s.result for run in runs for s in run.results]
    met = sum(meets_slo(r, slo_ms) for r in counted) / len(counted) if slo_ms and counted else None
    return {
        "request_throughput": completed / seconds,
        "output_throughput": output / seconds,
        "total_token_throughput": (sum(w.completed_prompt_tokens for w in windows) + output) / seconds,
        "request_goodput": completed / seconds * met if met is not None else None,
    }


def repeat_summary(
    run: LevelRun,
    *,
    slo_ms: dict,
    tokenizer,
    prefix_caching: bool,
    client_cost: ClientCost | None = None,
    in_sessions: bool = False,
) -> dict:
    """One pass of a level: vLLM's result fields, its rates, what it asked of the client, server
    state and validity checks (the client's against `client_cost`, its calibrated ceiling)."""
    results = [s.result for s in run.results]
    summary = aggregate(results, run.duration_s)
    series = MetricsSeries(run.window_samples(), run.metrics.available)  # the window's scrapes
    preemptions = series.first_last("vllm:num_preemptions_total")
    # vLLM's histograms hold every request that finished during the pass, the ramp's and the
    # hold's too: the time split is over those.
    finished = [s.result for s in (run.window.finished if run.window else run.results)]
    rates = open_loop_rates(run) or {}
    records = request_records(run)
    summary.update(
        {
            "offered_request_rate": rates.get("offered"),
            "sent_request_rate": rates.get("sent"),
            "achieved_request_rate": rates.get("achieved"),
            "request_goodput": goodput(results, run.duration_s, slo_ms) if slo_ms else None,
            "client_cpu_s": run.client_cpu_s,
            "client_processes": run.processes,
            **client_rates(run),
            "peak_kv_cache_usage_perc": series.peak("vllm:kv_cache_usage_perc"),
            "peak_num_requests_running": series.peak("vllm:num_requests_running"),
            "peak_num_requests_waiting": series.peak("vllm:num_requests_waiting"),
            "preemptions": preemptions[1] - preemptions[0] if series.available else None,
            "checks": validity_checks(run, tokenizer, prefix_caching, client_cost, in_sessions),
            "window": run.window.to_json() if run.window else None,
            **windowed_throughput([run], slo_ms),
            "metrics_series": run.metrics.samples,
            "time_totals": pass_totals(run.metrics, finished),
            "requests": records,
            "uncounted_requests": uncounted_records(run),
            "cancelled_requests": run.window.cancelled if run.window else [],
            "started_unix": unix_time(run.started),
            **queue_figures(records),
        }
    )
    return summary


def queue_figures(records: list[dict]) -> dict:
    """Open loop: the client queue time and the E2E latency counted from the schedule's send
    (e2el + client queue) over the successful requests, as vLLM reports them
    (client_queue_time, e2el_including_client_queue), and the worst send lag; {} for a closed
    loop and for sessions (only a session's first turn is scheduled; its start lag is the
    level's send_lag check). Of one pass's records, or of every repeat's together."""
    timed = [r for r in records if "client_queue_s" in r and "turn" not in r]
    if not timed:
        return {}
    done = [r for r in timed if r["success"]]
    return {
        **distribution("client_queue_time", [r["client_queue_s"] for r in done]),
        **distribution("e2el_including_client_queue", [r["e2el"] + r["client_queue_s"] for r in done]),
        "max_send_lag_ms": max(r["send_lag_s"] for r in timed) * MS,
    }


def record(run: LevelRun, streamed) -> dict:
    """A request as the client saw it (window.streamed_record); a turn also with its user,
    conversation, place and think time."""
    return {**streamed_record(streamed, run.started), **run.turns.get(streamed.result.request_id, {})}


def request_records(run: LevelRun) -> list[dict]:
    return [record(run, s) for s in run.results]


def uncounted_records(run: LevelRun) -> list[dict]:
    """A windowed pass's requests that finished uncounted (sent in the ramp, the hold or the
    drain), recorded as the counted ones are: the server held their KV blocks and timed them
    too (kv_validation, the time split). [] for a whole pass."""
    if run.window is None:
        return []
    counted = {id(s) for s in run.results}
    return [record(run, s) for s in run.window.finished if id(s) not in counted]


def worst_checks(repeats: list[dict]) -> list[dict]:
    """Each check once per level: its worst status over the repeats, with that repeat named."""
    worst = {}
    for index, repeat in enumerate(repeats, start=1):
        for item in repeat["checks"]:
            kept = worst.get(item["name"])
            if kept is None or STATUS_RANK[item["status"]] < STATUS_RANK[kept["status"]]:
                worst[item["name"]] = {**item, "detail": f"{item['detail']} (repeat {index} of {len(repeats)})"}
    return list(worst.values())


def repeats_agree(repeats: list[dict]) -> dict:
    """Flags (warn) a level whose repeats disagree beyond their intervals: for TTFT and TPOT,
    the 95 % order-statistic intervals of each repeat's median must share a common point.
    Disjoint intervals mean the machine or server changed between repeats, not sampling
    noise: the interval across repeats holds that change, a single repeat would hide it."""
    if len(repeats) < 2:
        return check("repeats_agree", "warn", None, "one repeat: no spread between repeats to show; raise load.repeats")
    disjoint = []
    for metric in AGREEMENT_METRICS:
        intervals = []
        for repeat in repeats:
            values = [r[metric] for r in repeat["requests"] if r["success"] and r[metric] is not None]
            interval = median_interval(values)
            if interval is not None:
                intervals.append(interval)
        if len(intervals) >= 2 and max(low for low, _ in intervals) > min(high for _, high in intervals):
            shown = ", ".join(f"[{low * MS:.0f}, {high * MS:.0f}]" for low, high in intervals)
            disjoint.append(f"median {metric.upper()} ms {shown}")
    return check(
        "repeats_agree",
        "warn" if disjoint else "pass",
        len(disjoint),
        "the repeats' 95 % intervals of the median do not overlap, so the machine or server changed "
        "between them (the interval across repeats includes that change): " + "; ".join(disjoint)
        if disjoint
        else f"the {len(repeats)} repeats' 95 % intervals of the median TTFT and TPOT overlap",
    )


def percentile_support(pooled: list[dict]) -> dict:
    """Per latency, the pooled sample size and the percentiles it supports (percentile_needs)."""
    support = {}
    for metric in ("ttft", "tpot", "e2el"):
        n = sum(1 for r in pooled if r["success"] and r[metric] is not None)
        support[metric] = {"n": n, "supported": [q for q in PERCENTILES if n >= percentile_needs(q)]}
    support["itl"] = {"n": sum(len(r["itl"]) for r in pooled if r["success"])}
    support["itl"]["supported"] = [q for q in PERCENTILES if support["itl"]["n"] >= percentile_needs(q)]
    return support


def summarize_level(
    runs: list[LevelRun],
    *,
    level: Level,
    slo_ms: dict,
    tokenizer,
    prefix_caching: bool,
    client_cost: ClientCost | None = None,
    sessions: list[dict] | None = None,
) -> dict:
    """A level over its repeats: vLLM's result fields over the pooled requests (durations
    summed), each figure of ACROSS_REPEATS with a 95 % CI over the repeats, every repeat kept.
    A users level: `sessions`, each repeat's session_figures, kept on it with its checks, and
    their mean on the level."""
    repeats = [
        repeat_summary(
            run,
            slo_ms=slo_ms,
            tokenizer=tokenizer,
            prefix_caching=prefix_caching,
            client_cost=client_cost,
            in_sessions=level.users,
        )
        for run in runs
    ]
    for repeat, figures in zip(repeats, sessions or [], strict=bool(sessions)):
        repeat["sessions"] = figures
        repeat["checks"] += session_checks(figures, repeat["window"]["seconds"])
    results = [s.result for run in runs for s in run.results]
    duration = sum(run.duration_s for run in runs)
    summary = aggregate(results, duration)
    pooled = [r for repeat in repeats for r in repeat["requests"]]
    arrivals = level.arrivals
    time_split = breakdown(pooled_totals([repeat["time_totals"] for repeat in repeats]))

    def mean_of(key):
        values = [repeat[key] for repeat in repeats if repeat[key] is not None]
        return sum(values) / len(values) if values else None

    # Server figures from /metrics: None where the server publishes none (an external endpoint).
    def max_of(key):
        values = [repeat[key] for repeat in repeats if repeat[key] is not None]
        return max(values) if values else None

    def sum_of(key):
        values = [repeat[key] for repeat in repeats if repeat[key] is not None]
        return sum(values) if values else None

    summary.update(
        {
            "api": level.api,
            "mode": level.mode,
            "max_concurrency": level.concurrency,
            "request_rate": arrivals.rate if arrivals is not None else "inf",
            "ramp_end_rate": arrivals.ramp_to if arrivals is not None else None,
            "burstiness": arrivals.burstiness if arrivals is not None else None,
            "trace_scale": arrivals.scale if isinstance(arrivals, TraceArrivals) else None,
            "offered_request_rate": mean_of("offered_request_rate"),
            "sent_request_rate": mean_of("sent_request_rate"),
            "achieved_request_rate": mean_of("achieved_request_rate"),
            "request_goodput": goodput(results, duration, slo_ms) if slo_ms else None,
            "failed_by_cause": failures_by_cause(results),
            "client_cpu_s": sum(run.client_cpu_s for run in runs),
            "client_processes": max_of("client_processes"),
            "client_request_rate": max_of("client_request_rate"),
            "client_chunk_rate": max_of("client_chunk_rate"),
            "peak_kv_cache_usage_perc": max_of("peak_kv_cache_usage_perc"),
            "peak_num_requests_running": max_of("peak_num_requests_running"),
            "peak_num_requests_waiting": max_of("peak_num_requests_waiting"),
            "preemptions": sum_of("preemptions"),
            **queue_figures(pooled),
            "across_repeats": {key: summarize(repeat[key] for repeat in repeats).to_json() for key in ACROSS_REPEATS},
            "percentile_support": percentile_support(pooled),
            "time_breakdown": time_split,
            "checks": [*worst_checks(repeats), repeats_agree(repeats), *([time_split["check"]] if time_split else [])],
            "repeats": repeats,
            **windowed_throughput(runs, slo_ms),
        }
    )
    if sessions:
        summary["sessions"] = pooled_session_figures(sessions)
    return summary


def expected_client_share(level: Level, requests: list[LoadRequest], client_cost: ClientCost | None) -> float:
    """load.client_processes auto, for a ramp or trace level (open loop, whole pass): the share
    of a core one client process is expected to need, from the calibrated model, a r + b r T,
    r the schedule's highest rate and T its mean output length (0 without a calibration)."""
    if client_cost is None:
        return 0.0
    rate = max(level.arrivals.rate, level.arrivals.ramp_to or 0.0)  # a ramp's highest
    mean_tokens = sum(r.max_tokens for r in requests) / len(requests)
    return client_cost.load_share(rate, rate * mean_tokens)


def run_sweep(
    *,
    server: VLLMServer | ExternalEndpoint,
    workload: list[dict],
    pool: list[dict],
    load: dict,
    seed: int,
    timeout_s: float,
    tokenizer,
    prefix_caching: bool,
    client_cost: ClientCost | None = None,
    sessions: SessionPlan | None = None,
    progress=print,
) -> list[dict]:
    """Every configured level against a running server, `load.repeats` rounds over the levels
    in turn, each level pass after its warm-up, repeat k's open-loop schedule seeded seed + k: a
    closed loop or fixed rate in a steady-state window (`measure_pass`) over distinct requests
    from `pool` (users: in `sessions`' conversations), a ramp on load.ramp.requests of them, a
    trace replaying its own. Stops at the first level the server does not survive. See
    docs/method.md#steady-state-windows and #sessions."""
    traced = trace_requests(workload)
    trace = workload_trace(workload)
    levels = configured_levels(load, workload[0]["api"], has_chat_template(tokenizer), trace)
    supply = RequestSupply(pool, load_request, seed)
    window = Window(load["window_s"], load["window_requests"])
    runs = [[] for _ in levels]
    sessions_figures = [[] for _ in levels]  # users levels: each pass's session_figures

    def how(level: Level) -> dict:
        """What every pass of a level is sent and scraped with, whole or windowed."""
        return {"interval_s": load["metrics_interval_s"], "timeout_s": timeout_s, "api": level.api}

    def whole_pass(level: Level, batch: list[LoadRequest], *, concurrency, arrivals, pass_seed, processes=1):
        run = asyncio.run(
            run_level(
                server.base_url,
                server.served_name,
                batch,
                concurrency=concurrency,
                arrivals=arrivals,
                seed=pass_seed,
                **how(level),
                api_key=server.api_key,
                scrape_metrics=server.metrics,
                processes=processes,
            )
        )
        ensure_alive(server, f"the load level {level.label}", run.results)
        return run

    def windowed_pass(level: Level, pass_seed: int):
        measured = measure_pass(
            server,
            iter(()) if level.users else supply.take(),
            what=f"the load level {level.label}",
            pool=None if level.users else f"{len(pool)} distinct requests in request_pool.jsonl",
            fix="lower the level",
            window=window,
            concurrency=level.concurrency,
            arrivals=level.arrivals,
            seed=pass_seed,
            **how(level),
            drain=True,  # every request vLLM timed among the results: the time split needs them
            users=sessions if level.users else None,
            processes=window_processes(load),
        )
        return level_run(measured), session_figures(measured.run, level.concurrency) if level.users else None

    def session_ramp_pass(level: Level, pass_seed: int) -> LevelRun:
        measured = measure_pass(
            server, iter(()), what=f"the load level {level.label}", pool=None, fix="lower the level",
            window=window, concurrency=None, arrivals=level.arrivals, seed=pass_seed, **how(level), drain=True,
            users=sessions, whole_sessions=load["session_ramp"]["sessions"], processes=window_processes(load),
        )  # fmt: skip
        return whole_sessions_run(measured.run)

    def ramp_requests() -> list[LoadRequest]:
        return list(itertools.islice(supply.take(), load["ramp"]["requests"]))

    for repeat in range(load["repeats"]):
        for index, level in enumerate(levels):
            if load["warmup"]:
                warm = warmup_requests(cycle_requests(workload, level.concurrency or 1), level)
                whole_pass(level, warm, concurrency=len(warm), arrivals=None, pass_seed=seed)
            if level.windowed:
                run, figures = windowed_pass(level, seed + repeat)
                if figures is not None:
                    sessions_figures[index].append(figures)
            elif level.mode == "session_ramp":
                run = session_ramp_pass(level, seed + repeat)
            else:
                requests = traced if level.mode == "trace" else ramp_requests()
                processes = load["client_processes"]
                if processes == "auto":
                    processes = processes_needed(
                        expected_client_share(level, requests, client_cost), len(os.sched_getaffinity(0))
                    )
                run = whole_pass(
                    level,
                    requests,
                    concurrency=level.concurrency,
                    arrivals=level.arrivals,
                    pass_seed=seed + repeat,
                    processes=processes,
                )
            runs[index].append(run)
            summary = {**aggregate([s.result for s in run.results], run.duration_s), **windowed_throughput([run], None)}
            counted = f"{len(run.results)} of {run.window.sent} sent counted, " if run.window else ""
            progress(
                f"repeat {repeat + 1}/{load['repeats']}, {level.label}: {counted}{summary['output_throughput']:.1f} "
                f"output tok/s, median TTFT {summary['median_ttft_ms']:.0f} ms, median TPOT "
                f"{summary['median_tpot_ms']:.1f} ms, {summary['failed']} failed"
            )
    return [
        summarize_level(
            level_runs,
            level=level,
            slo_ms=load["slo_ms"],
            tokenizer=tokenizer,
            prefix_caching=prefix_caching,
            client_cost=client_cost,
            sessions=figures,
        )
        for level, level_runs, figures in zip(levels, runs, sessions_figures)
    ]
