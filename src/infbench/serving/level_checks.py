"""Validity checks of one load level: what must hold for its numbers to mean what they say."""

from __future__ import annotations

import math
import os
import statistics

from infbench.core.capacity_terms import HELD_CYCLES, STALL_FLOOR_MS, THINK_LATE, USERS_HELD
from infbench.core.checks import CLIENT_FAIL, CLIENT_WARN, check, not_available
from infbench.core.metrics import MS, failures_text
from infbench.serving.client import LevelRun
from infbench.serving.client_cost import ClientCost
from infbench.serving.sessions import cycles_in, thinking_late, users_not_held
from infbench.serving.window import QUEUE_GROWTH, SATURATED_SHARE, saturation, streamed_record

# load.client_processes: auto spreads a level needing CLIENT_WARN or more of a core over enough
# processes for each to need at most this share.
PROCESS_SHARE = 0.25
SEND_LAG_WARN_S = 0.05  # the latest a request may leave after its scheduled time
QUEUE_SHARE_WARN = 0.1  # median client queue time against the median E2E latency


def open_loop_rates(run: LevelRun) -> dict | None:
    """Offered, sent and achieved request rates of an open-loop level, over the sample itself
    (a windowed pass: its counted requests), each as (n - 1) / the span it took:

    offered  = (N - 1) / span of scheduled sends
    sent     = (n - 1) / span of actual sends
    achieved = (n - 1) / span of completions (a server that keeps up completes requests as fast
               as they were sent; completed / duration would read low even then, because the
               duration includes the last request's own latency)
    """
    done = [s for s in run.results if s.result.success]
    if not run.scheduled or len(done) < 2:
        return None
    sends = sorted(s.sent_at for s in run.results)
    completions = sorted(s.sent_at + s.result.e2el for s in done)
    return {
        "offered": (len(run.scheduled) - 1) / (run.scheduled[-1] - run.scheduled[0]),
        "sent": (len(sends) - 1) / (sends[-1] - sends[0]),
        "achieved": (len(completions) - 1) / (completions[-1] - completions[0]),
    }


def saturation_check(run: LevelRun, rates: dict) -> dict:
    """An open-loop level's server kept up, by the capacity search's rule (serving/window.py):
    saturated where it completed requests at under SATURATED_SHARE of the rate they were sent at
    (a windowed pass: completed in the window against counted, both over the window; a whole
    pass: the rates above) or its waiting requests rose over the window. Completions of a few
    requests spread over their latencies, so a share near 1 tells nothing by itself. What this
    cannot see: a rate above the server's by less than twice while nothing waits (on CPU vLLM
    admits arrivals into its running batch up to max_num_seqs, so the batch grows instead); a
    count of requests in flight cannot tell that from the build-up over a window of a few
    latencies. The capacity search's rate search sizes its windows in latencies for that."""
    if run.window is not None and run.window.seconds > 0:
        sent = len(run.results) / run.window.seconds
        achieved = run.window.completed / run.window.seconds
    else:
        achieved, sent = rates["achieved"], rates["sent"]
    behind, growing = saturation(sent, achieved, run.window_samples())
    return check(
        "achieved_vs_offered_rate",
        "warn" if behind or growing else "pass",
        achieved / sent,
        f"completions came at {achieved:.2f} req/s for {sent:.2f} req/s sent ({rates['offered']:.2f} offered)"
        + ("; requests waiting in the server rose over the window" if growing else "")
        + f": saturated (warn) below {SATURATED_SHARE:.0%} or where waiting requests rise by "
        f"{QUEUE_GROWTH:g} or more (second half of the scrapes against the first), the capacity search's rule; "
        "a rate above the server's by less than twice, with nothing waiting, passes",
    )


def open_loop_timing(run: LevelRun) -> dict | None:
    """Where an open-loop request's time before it reached the server went, per request, as
    window.streamed_record computes it (None for a closed loop, which sends each request when a
    slot frees)."""
    if not run.scheduled:
        return None
    records = [streamed_record(s, run.started) for s in run.results]
    return {key: [record[key] for record in records] for key in ("scheduled_s", "send_lag_s", "client_queue_s")}


def client_rates(run: LevelRun) -> dict:
    """What the level asked of the client: requests sent and chunks with a choice received, each
    a second of the level's duration."""
    chunks = sum(len(s.result.itl) + 1 for s in run.results if s.result.success)
    return {"client_request_rate": len(run.results) / run.duration_s, "client_chunk_rate": chunks / run.duration_s}


def client_ceiling_check(run: LevelRun, client_cost: ClientCost | None) -> dict:
    """Did the client keep up? The larger of two shares of one core: the busiest client
    process's CPU seconds over the level's duration, and what the calibrated model says the
    level's rates need (client_cost: a r + b k for r requests and k chunks a second) over the
    cores its processes could use, min(P, the CPUs the client may use): processes that time-share
    one core are no lighter than one. A windowed pass whose event loop woke over STALL_FLOOR_MS
    late, its client starved, warns at least (docs/method.md#client-limited-probes)."""
    rates = client_rates(run)
    measured = max(run.process_cpu_s or [run.client_cpu_s]) / run.duration_s
    cores = min(run.processes, len(os.sched_getaffinity(0)))
    spread = f" over {run.processes} client processes on up to {cores} CPUs" if run.processes > 1 else ""
    detail = (
        f"chunks at {rates['client_chunk_rate']:.0f}/s, requests at {rates['client_request_rate']:.1f}/s{spread}; "
        f"the busiest client process measured {measured:.0%} of a core"
    )
    share = measured
    if client_cost is not None:
        needed = client_cost.load_share(rates["client_request_rate"], rates["client_chunk_rate"]) / cores
        share = max(share, needed)
        detail += (
            f", and these rates need {needed:.0%} of the calibrated ceiling of a client process a core "
            f"({client_cost.cpu_per_request_s * 1e6:.0f} us a request + {client_cost.cpu_per_chunk_s * 1e6:.1f} us a "
            f"chunk: at most {client_cost.chunk_ceiling:.0f} chunks/s)"
        )
    else:
        detail += " (no calibration in this stage)"
    status = "fail" if share >= CLIENT_FAIL else "warn" if share >= CLIENT_WARN else "pass"
    late_ms = (run.loop_late_s or 0.0) * MS
    if late_ms > STALL_FLOOR_MS:
        status = "fail" if status == "fail" else "warn"
        detail += (
            f"; its event loop woke {late_ms:.0f} ms late in the window (over {STALL_FLOOR_MS:.0f} ms): the client "
            "was starved, and its requests' timestamps carry the stall"
        )
    detail += (
        f"; from {CLIENT_WARN:.0%} warn, from {CLIENT_FAIL:.0%} fail: the level's numbers then describe the client, "
        "not the server (load.client_processes spreads a level over more processes, where CPUs are free)"
    )
    return check("client_ceiling", status, share, detail)


def processes_needed(share: float, cpus: int) -> int:
    """load.client_processes auto: one process for a level expected to need under CLIENT_WARN of
    a core; above, enough for each to need at most PROCESS_SHARE, at most one a CPU the client
    may use."""
    if share < CLIENT_WARN:
        return 1
    return max(1, min(cpus, math.ceil(share / PROCESS_SHARE)))


def steady_window_check(run: LevelRun) -> dict:
    """A windowed pass held its load until its last counted request finished: fails where the
    request pool (or an open loop's schedule, sized for a hold of server.request_timeout_s) ran
    out first, so counted requests saw the load fall as slots went unfilled."""
    window = run.window
    detail = (
        f"window {window.opened_s:.1f}-{window.closed_s:.1f} s of a {window.ended_s:.1f} s pass: "
        f"{len(run.results)} of {window.sent} requests sent counted"
    )
    if window.cut_short:
        return check(
            "steady_window",
            "fail",
            len(run.results),
            detail + "; the request pool (or the schedule) ran out before the last counted request finished, so "
            "the load fell under them: raise workload.pool_requests (a dataset: use a larger one)",
        )
    return check("steady_window", "pass", len(run.results), detail + ", the load held until the last of them finished")


def send_lag_check(lags_s: list[float], what: str) -> dict:
    """An open loop's schedule kept: its latest send (`what`: requests, or sessions' first turns)
    at most SEND_LAG_WARN_S after its scheduled time."""
    lag = max(lags_s)
    return check(
        "send_lag",
        "pass" if lag <= SEND_LAG_WARN_S else "warn",
        lag,
        f"{what} up to {lag * MS:.0f} ms after their scheduled time (warn above {SEND_LAG_WARN_S * MS:.0f} ms: "
        "the client kept another schedule than the one offered)",
    )


def validity_checks(
    run: LevelRun, tokenizer, prefix_caching: bool, client_cost: ClientCost | None = None, in_sessions: bool = False
) -> list[dict]:
    """`in_sessions`: a users level, whose turns carry their conversations, so that prefix-cache
    hits are the workload's own, not a flattering repeat."""
    results = [s.result for s in run.results]
    failed = sum(not r.success for r in results)
    checks = [check("failed_requests", "fail" if failed else "pass", failed, failures_text(results))]
    if run.window is not None:
        checks.append(steady_window_check(run))
    done = [s for s in run.results if s.result.success]
    short = sum(s.result.output_tokens < s.max_tokens for s in done)
    checks.append(
        check(
            "short_outputs",
            "fail" if short else "pass",
            short,
            f"{short} outputs shorter than their max_tokens (ignore_eos should prevent it)",
        )
    )
    if tokenizer is not None and done:
        diffs = [
            abs(len(tokenizer(s.text, add_special_tokens=False)["input_ids"]) - s.result.output_tokens) for s in done
        ]
        mean_diff = sum(diffs) / len(diffs)
        checks.append(
            check(
                "usage_vs_retokenized",
                "pass" if mean_diff <= 1 else "warn",
                mean_diff,
                f"mean |re-tokenized text - usage.completion_tokens| = {mean_diff:.2f} tokens; usage is "
                "what the metrics use (text re-tokenizes differently at merges)",
            )
        )
    checks.append(client_ceiling_check(run, client_cost))
    rates = open_loop_rates(run)
    if rates is not None:
        checks.append(saturation_check(run, rates))
    timing = open_loop_timing(run)
    if timing is not None:
        checks.append(send_lag_check(timing["send_lag_s"], "requests reached their send"))
        median_queue = statistics.median(timing["client_queue_s"])
        median_e2el = statistics.median(s.result.e2el for s in done) if done else 0.0
        share = median_queue / median_e2el if median_e2el > 0 else 0.0
        checks.append(
            check(
                "client_queue",
                "pass" if share <= QUEUE_SHARE_WARN else "warn",
                share,
                f"requests waited {median_queue * MS:.0f} ms (median) in the client for a free slot (and a worker), "
                f"{share:.0%} of the median E2E latency (warn above {QUEUE_SHARE_WARN:.0%}): latencies from the "
                "send leave that wait out; e2el_including_client_queue counts it",
            )
        )
    if run.session_start_lags:  # sessions on a ramp: their first turns keep the schedule
        checks.append(send_lag_check(run.session_start_lags, "sessions started"))
    if not run.metrics.available:
        return checks + [
            not_available(name, "vLLM's /metrics") for name in ("metrics_coverage", "prefix_cache_hit_rate")
        ]
    samples = run.window_samples()
    busy = [sample for sample in samples if sample.get("vllm:num_requests_running", 0) > 0]
    span = "window" if run.window else "pass"
    checks.append(
        check(
            "metrics_coverage",
            "pass" if len(busy) >= 2 else "warn",
            len(busy),
            f"{len(busy)} /metrics samples caught requests running during this {run.duration_s:.1f} s {span}; "
            "with fewer than 2 the server-state figures miss the level: lower load.metrics_interval_s or raise "
            "load.window_s",
        )
    )
    queries = run.metrics.first_last("vllm:prefix_cache_queries_total")
    hits = run.metrics.first_last("vllm:prefix_cache_hits_total")
    asked_tokens = queries[1] - queries[0]
    hit_rate = (hits[1] - hits[0]) / asked_tokens if asked_tokens else 0.0
    flattering = hit_rate > 0.1 and not in_sessions
    checks.append(
        check(
            "prefix_cache_hit_rate",
            "warn" if flattering else "pass",
            hit_rate,
            f"prefix-cache hit rate {hit_rate:.0%} (prefix caching {'on' if prefix_caching else 'off'}); "
            + (
                "each turn carries its conversation so far, which a caching server holds: hits are the sessions' own"
                if in_sessions
                else "a high rate means repeated prompts skip prefill and flatter TTFT"
            ),
        )
    )
    return checks


def session_checks(figures: dict, window_s: float) -> list[dict]:
    """A users level's pass read through Little's law (serving/sessions.py's session_figures):
    it held its users, and its client took their turns on time (docs/method.md#sessions)."""
    users, implied = figures["users"], figures["users_from_littles_law"]
    taken, drawn = figures["mean_think_s"], figures["mean_think_drawn_s"]
    if implied is None:
        held = check("users_held", "not_available", None, "not available: no think time was taken in the window")
    elif (cycles := cycles_in(figures, window_s)) < HELD_CYCLES:
        held = check(
            "users_held",
            "not_available",
            implied,
            f"not available: the {window_s:.1f} s window spans {cycles:.1f} of a user's turn-and-think cycles, fewer "
            f"than {HELD_CYCLES}: a turn whose think time outlasts what is left of the window is sent after it "
            f"closes, uncounted, so Little's law ({implied:.1f} for {users} users) reads low; raise load.window_s",
        )
    else:
        held = check(
            "users_held",
            "warn" if users_not_held(figures) else "pass",
            implied,
            f"requests in flight x (response + think) / response = {implied:.1f} for {users} users (warn beyond "
            f"{USERS_HELD:.0%} off: users whose turns stopped or never ended)",
        )
    if taken is None or not drawn:
        missing = "no think time was drawn (sessions.think_s: 0)" if drawn == 0 else "no think time was taken"
        on_time = check("users_on_time", "not_available", None, f"not available: {missing}")
    else:
        on_time = check(
            "users_on_time",
            "warn" if thinking_late(figures) else "pass",
            taken / drawn,
            f"users thought {taken:.2f} s on average before their turns, {drawn:.2f} s drawn (warn beyond "
            f"{THINK_LATE:.0%} longer: the client was late to their turns, so it offered less load than its users)",
        )
    return [held, on_time]
