"""A capacity probe: windowed passes (`serving.window.measure_pass`) at one load until its
decision rule (`Rule`) decides it met, missed or undecided (`verdict`), each pass's
window closed early once the probe is missed (`missed_whatever_follows`) or the search's time
is up (`TimeBudget`). See docs/method.md#capacity-windows, #capacity-decisions,
#early-stopping, #capacity-curtailment and #capacity-time-budget.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

from infbench.capacity.search import Probe, binomial_cdf, early_stopping_n, wilson_interval
from infbench.core.capacity_terms import (
    COUNTED,
    IN_SESSIONS,
    LAG_GROWTH_BEHIND,
    STALL_RETRIES,
    THINK_LATE,
    load_text,
    stall_limit_ms,
)
from infbench.core.checks import CLIENT_FAIL
from infbench.core.metrics import MS, RequestResult, aggregate, meets_slo
from infbench.core.stats import percentile, summarize
from infbench.engines.server_metrics import MetricsSeries
from infbench.serving.arrivals import Arrivals, TraceArrivals, replayable, workload_trace
from infbench.serving.client import cycle_requests, load_request, run_level
from infbench.serving.request_table import probe_rows
from infbench.serving.sessions import SessionPlan, pooled_session_figures, session_figures, thinking_late
from infbench.serving.sweep import Level, warmup_requests
from infbench.serving.window import MeasuredPass, RequestSupply, Window, ensure_alive, measure_pass, window_processes


@dataclass(frozen=True)
class Rule:
    """capacity.decision and its confidence: `wilson` (the 95 % Wilson interval against the
    target) or `early_stopping` (LoadGen's; docs/method.md#early-stopping)."""

    name: str = "wilson"
    confidence: float = 0.99

    @classmethod
    def of(cls, settings: dict) -> Rule:
        return cls(settings.get("decision", "wilson"), settings.get("confidence", 0.99))

    def to_json(self) -> dict:
        return {"name": self.name, "confidence": self.confidence if self.name == "early_stopping" else 0.95}


WILSON = Rule()


def verdict(
    met_slo: int, counted: int, target: float, saturated: bool = False, client_limited: bool = False, rule=WILSON
) -> str:
    """met / missed / undecided: met_slo of counted against the target by `rule`; missed where
    saturated, else undecided where the client was the limit (docs/method.md#client-limited-probes)."""
    if rule.name == "early_stopping":  # met: LoadGen's n(t); missed: the mirror test at the same confidence
        met = target < 1 and counted >= early_stopping_n(counted - met_slo, target, rule.confidence)
        missed = binomial_cdf(met_slo, counted, target) < 1 - rule.confidence
    else:
        low, high = wilson_interval(met_slo, counted)
        met, missed = low >= target, high < target
    if saturated:
        return "missed"
    if client_limited:
        return "undecided"
    return "missed" if missed else "met" if met else "undecided"


def missed_whatever_follows(
    prior_met_slo: int, prior_counted: int, planned: int, target: float, slo_ms: dict, rule=WILSON
):
    """A pass's `Window.settled`: given its finished counted requests, whether the probe is
    missed even if every one of its `planned` not yet seen to miss meets the SLO."""

    def settled(finished) -> bool:
        misses = sum(not meets_slo(r, slo_ms) for r in finished)
        return verdict(prior_met_slo + planned - misses, prior_counted + planned, target, rule=rule) == "missed"

    return settled


class TimeBudget:
    """capacity.max_search_s from the last `start()`; never out before the first."""

    def __init__(self, seconds: float | None = None):
        self.seconds, self.deadline = seconds, None

    def start(self) -> float:
        started = time.perf_counter()
        self.deadline = started + self.seconds
        return started

    def out(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline


@dataclass
class PassRecord:
    """One windowed pass of a probe and how many of its counted requests met every SLO."""

    measured: MeasuredPass
    met_slo: int
    sessions: dict | None = None  # a pass of users in sessions: its sessions.session_figures
    turns_met: list[tuple[int, bool]] | None = None  # sessions: each counted turn's place and whether it met the SLO
    stalled: bool = False  # its client's event loop woke later than stall_limit_ms
    number: int | None = None  # its place among the probe's passes, stalled ones included (the request table's `pass`)

    @classmethod
    def of(
        cls, measured: MeasuredPass, slo_ms: dict, users: int | None = None, number: int | None = None
    ) -> PassRecord:
        """`users`: a users pass's users (sessions on a schedule: None); `number`: its place in the probe."""
        met = [meets_slo(r, slo_ms) for r in measured.counted]
        run = measured.run
        stalled = run.loop_late_s * MS > stall_limit_ms(slo_ms)
        if run.turns is None:
            return cls(measured, sum(met), stalled=stalled, number=number)
        places = [log.turn for log, counted in zip(run.turns, run.counted) if counted]
        turns_met = list(zip(places, met, strict=True))
        return cls(measured, sum(met), session_figures(run, users), turns_met, stalled, number)

    @property
    def requests(self) -> int:
        return len(self.measured.run.counted_results)

    @property
    def saturated(self) -> bool:
        return self.measured.behind or self.measured.growing

    @property
    def client_behind(self) -> bool:
        """Open loop (sessions on a schedule: their first turns): its send lag grew by over
        LAG_GROWTH_BEHIND of its window. Users in sessions: they took their turns late, thinking
        over THINK_LATE longer than drawn."""
        late_thinking = self.sessions is not None and thinking_late(self.sessions)
        growth, window_s = self.measured.send_lag_growth_s, self.measured.run.window_s
        return late_thinking or (growth is not None and window_s > 0 and growth > LAG_GROWTH_BEHIND * window_s)

    @property
    def client_cpu_share(self) -> float | None:
        """The busiest client process's CPU seconds over the pass's wall time: its share of one core."""
        run = self.measured.run
        return max(run.process_cpu_s or [run.client_cpu_s]) / run.ended_s if run.ended_s else None

    @property
    def client_busy(self) -> bool:
        share = self.client_cpu_share
        return share is not None and share >= CLIENT_FAIL

    def to_json(self) -> dict:
        run, measured = self.measured.run, self.measured
        counted_results = measured.counted
        counted, window_s = len(counted_results), run.window_s
        summary = aggregate(counted_results, window_s or run.ended_s)
        series = run.metrics
        in_window = run.window_samples()
        running = [s["vllm:num_requests_running"] for s in in_window if "vllm:num_requests_running" in s]
        preemptions = series.first_last("vllm:num_preemptions_total")
        completed_rate = measured.completed / window_s if window_s else None
        growth = measured.send_lag_growth_s
        return {
            "pass": self.number,
            "window_s": [run.opened_s, run.closed_s],
            "sent": run.sent,
            "requests": counted,
            "supply_exhausted": run.exhausted,
            "met_slo": self.met_slo,
            "settled_early": run.settled_early,
            "closed_at_deadline": run.closed_at_deadline,
            "failed": summary["failed"],
            "duration_s": run.ended_s,
            "output_throughput": measured.output_tokens / window_s if window_s else 0.0,
            "request_throughput": completed_rate or 0.0,
            **{f"{stat}_ms": summary[f"{stat}_ms"] for stat in PASS_LATENCIES},
            "offered_request_rate": (counted / window_s if window_s else None) if measured.open_loop else None,
            "achieved_request_rate": completed_rate if measured.open_loop else None,
            "queue_growing": measured.growing,
            "saturated": self.saturated,
            "send_lag_growth_ms": growth * MS if growth is not None else None,
            "client_behind": self.client_behind,
            "client_cpu_share": self.client_cpu_share,
            "client_processes": run.processes,
            "client_loop_late_ms": run.loop_late_s * MS,
            "client_stalled": self.stalled,
            "mean_num_requests_running": sum(running) / len(running) if running else None,
            # Peaks in the window, as the binding limit reads it: the ramp's opening burst is not the load.
            **{f"peak_{name}": MetricsSeries(in_window, series.available).peak(f"vllm:{name}") for name in PEAKS},
            "preemptions": preemptions[1] - preemptions[0] if series.available else None,
            # The window's scrapes: the binding limit is read from values that co-occurred.
            "metrics_series": in_window,
            **({"sessions": self.sessions} if self.sessions is not None else {}),
        }


PASS_LATENCIES = ("median_ttft", "p99_ttft", "median_tpot", "p99_tpot", "median_itl", "median_e2el", "p99_e2el")
PEAKS = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")


def pooled_latency(results, name: str, q: float) -> float | None:
    values = [getattr(r, name) for r in results if r.success and getattr(r, name) is not None]
    return percentile([v * MS for v in values], q) if values else None


def client_limits(passes: list[PassRecord], met_slo: int, counted: int, target: float, rule=WILSON) -> list[str]:
    """How the client, not the server, limited a probe (docs/method.md#client-limited-probes),
    empty where it did not: "behind", a pass's client fell behind its schedule and the probe
    did not miss at the load it got; "busy", a pass's client used CLIENT_FAIL of a core and the
    server's queue never grew; "stalled", a pass stalled and was not measured again, and the
    server's queue never grew (passes measured again are not among `passes`)."""
    saturated = any(p.saturated for p in passes)
    missed = verdict(met_slo, counted, target, saturated, rule=rule) == "missed"
    limits = ["behind"] if any(p.client_behind for p in passes) and not missed else []
    limits += ["busy"] if any(p.client_busy for p in passes) and not saturated else []
    return limits + (["stalled"] if any(p.stalled for p in passes) and not saturated else [])


def probe_record(passes: list[PassRecord], repeats: int, target: float, out_of_time: bool, rule=WILSON) -> dict:
    """A probe over its passes: pooled attainment, its interval and verdict, pooled latencies,
    throughput across passes, the server's peaks (docs/method.md#capacity-decisions)."""
    records = [p.to_json() for p in passes]
    pooled = [r for p in passes for r in p.measured.counted]
    counted, met_slo = sum(p.requests for p in passes), sum(p.met_slo for p in passes)
    low, high = wilson_interval(met_slo, counted)
    saturated = any(p.saturated for p in passes)
    limits = client_limits(passes, met_slo, counted, target, rule)
    decision = verdict(met_slo, counted, target, saturated, bool(limits), rule)

    def peak(key):
        values = [r[key] for r in records if r[key] is not None]
        return max(values) if values else None

    preemptions = [r["preemptions"] for r in records if r["preemptions"] is not None]
    return {
        "passes": len(passes),
        "requests": counted,
        "sent": sum(r["sent"] for r in records),
        "met_slo": met_slo,
        "attainment": met_slo / counted if counted else 0.0,
        "attainment_ci95": [low, high],
        "decision": decision,
        "supply_exhausted": any(r["supply_exhausted"] for r in records),
        "output_throughput": summarize(r["output_throughput"] for r in records).to_json(),
        "request_throughput": summarize(r["request_throughput"] for r in records).to_json(),
        **{f"p99_{metric}_ms": pooled_latency(pooled, metric, 99) for metric in ("ttft", "tpot", "e2el")},
        "at_target_percentile_ms": {
            metric: pooled_latency(pooled, metric, 100 * target) for metric in ("ttft", "tpot", "e2el")
        },
        **{f"median_{metric}_ms": pooled_latency(pooled, metric, 50) for metric in ("ttft", "tpot", "e2el")},
        "median_itl_ms": percentile([g * MS for r in pooled if r.success for g in r.itl], 50)
        if any(r.itl for r in pooled)
        else None,
        "saturated": saturated,
        "client_cpu_share": peak("client_cpu_share"),
        "client_limited": bool(limits),
        "client_limited_by": limits,
        # Undecided, and not met even had every counted request met the SLO: no evidence of met.
        "too_few_to_meet": decision == "undecided" and verdict(counted, counted, target, rule=rule) != "met",
        "stopped_early": len(passes) < repeats,
        "out_of_time": out_of_time and decision == "undecided",
        **{f"peak_{name}": peak(f"peak_{name}") for name in PEAKS},
        "preemptions": sum(preemptions) if preemptions else None,
        **({"sessions": pooled_session_figures([r["sessions"] for r in records])} if "sessions" in records[0] else {}),
        **({"by_turn": by_turn(passes)} if passes[0].turns_met is not None else {}),
        "pass_records": records,
    }


def by_turn(passes: list[PassRecord]) -> list[dict]:
    """A sessions probe's counted turns by their place in the conversation (1: the first), pooled
    over its passes (docs/method.md#sessions): later turns carry longer prompts."""
    places: dict[int, list] = {}
    for one in passes:
        results = one.measured.counted
        for (place, met), result in zip(one.turns_met, results, strict=True):
            places.setdefault(place, []).append((met, result))
    rows = []
    for place, turns in sorted(places.items()):
        done = [r for _, r in turns if r.success]
        tpots = [r.tpot * MS for r in done if r.tpot is not None]
        met = sum(m for m, _ in turns)
        rows.append(
            {
                "turn": place,
                "turns": len(turns),
                "met_slo": met,
                "mean_prompt_tokens": sum(r.prompt_tokens for r in done) / len(done) if done else None,
                "median_ttft_ms": percentile([r.ttft * MS for r in done], 50) if done else None,
                "median_tpot_ms": percentile(tpots, 50) if tpots else None,
            }
        )
    return rows


def client_evidence(record: dict) -> str:
    """Why a client-limited probe's client was the limit: the reasons that counted (client_limits)."""
    late_ms = max((p.get("client_loop_late_ms", 0.0) for p in record.get("pass_records", [])), default=0.0)
    reasons = {
        "behind": f"its users took their turns late (thinking over {THINK_LATE:.0%} longer than drawn, or sessions "
        "starting behind their schedule), so this load was not offered"
        if "sessions" in record
        else "it fell behind its schedule, so this load was not offered",
        "busy": f"its busiest process used {(record['client_cpu_share'] or 0) * 100:.0f} % of a core, so its own "
        "delays are in the latencies (load.client_processes spreads a pass over more processes, where CPUs are free)",
        "stalled": f"its event loop stalled, woken up to {late_ms:.0f} ms late, in a pass not measured again "
        f"({STALL_RETRIES} stalled passes measured again already, the time up or the pool run dry), so its "
        "timestamps carry the stall",
    }
    return " and ".join(reasons[limit] for limit in record["client_limited_by"])


def probe_line(shown: str, record: dict, window: Window, met: bool) -> str:
    """The progress line of one probe."""
    decision, (low, high) = record["decision"], record["attainment_ci95"]
    return (
        f"probe {shown}: {record['attainment'] * 100:.0f} % of {record['requests']} counted requests "
        f"({record['sent']} sent) within the SLO [{low * 100:.0f}, {high * 100:.0f}] over {record['passes']} "
        f"window(s) of {window.seconds:g} s, p99 TTFT {record['p99_ttft_ms'] or 0:.0f} ms, p99 TPOT "
        f"{record['p99_tpot_ms'] or 0:.1f} ms, {record['output_throughput']['mean']:.1f} output tok/s: {decision}"
        + (" (saturated)" if record["saturated"] else "")
        + (
            f" (the client was the limit: {client_evidence(record)})"
            if record["client_limited"]
            else f": {record['requests']} counted requests cannot be met by the rule even all within the SLO, so "
            "steered as missed"
            if record["too_few_to_meet"]
            else f", so {'met' if met else 'missed'} by its point estimate"
            if decision == "undecided"
            else ""
        )
        + (" (the request pool ran out: raise workload.pool_requests)" if record["supply_exhausted"] else "")
        + (" (its window ended once missed)" if any(p["settled_early"] for p in record["pass_records"]) else "")
        + (" (capacity.max_search_s ran out: no more windows)" if record["out_of_time"] else "")
    )


class Prober:
    """Measures probes (closed-loop `concurrency`, open-loop `request_rate`, or `users` in chat
    sessions from `sessions`) on a running server with the config's `capacity` settings and
    `load_settings` (its load section), every probe drawing distinct requests from `pool` in a
    seeded order, within `budget`."""

    def __init__(
        self,
        server,
        workload: list[dict],
        pool: list[dict],
        settings: dict,
        load_settings: dict,
        *,
        seed: int,
        timeout_s: float,
        budget: TimeBudget | None = None,
        sessions: SessionPlan | None = None,
        progress=print,
    ):
        self.server, self.settings, self.load_settings, self.sessions = server, settings, load_settings, sessions
        self.seed, self.timeout_s, self.progress = seed, timeout_s, progress
        self.budget = budget or TimeBudget()
        self.workload, self.api = workload, workload[0]["api"]
        self.supply = RequestSupply(pool, load_request, seed)
        self.window = Window(settings["window_s"], settings["window_requests"])
        self.rule = Rule.of(settings)
        # A trace workload's open-loop probes replay the trace, its clock scaled to the rate.
        arrival_s = workload_trace(workload)
        self.trace = TraceArrivals(arrival_s) if replayable(arrival_s) else None
        self.trace_rows = [r for r in workload if r.get("kind") == "trace"]
        self.requests: list[dict] = []  # every probe's requests, as request_table rows

    def untimed(self, requests: int, concurrency: int, api: str, what: str) -> list[RequestResult]:
        """The workload's first `requests`, outputs cut as a warm-up's (docs/method.md#warm-ups),
        `concurrency` at a time through `api`, nothing counted: `what` names them if the server dies."""
        short = warmup_requests(cycle_requests(self.workload, requests), Level(requests, api=api))
        run = asyncio.run(
            run_level(
                self.server.base_url, self.server.served_name, short, concurrency=concurrency, arrivals=None,
                seed=self.seed, interval_s=self.load_settings["metrics_interval_s"], timeout_s=self.timeout_s,
                api=api, api_key=self.server.api_key, scrape_metrics=False,
            )
        )  # fmt: skip
        ensure_alive(self.server, what, run.results)
        return [streamed.result for streamed in run.results]

    def warm_up(self, concurrency: int | None, api: str) -> int:
        """Before a probe's first pass, as `serve` warms a level: as many requests as it keeps in
        flight (one at a rate), all at once, through `api`; how many were sent."""
        shown = f"concurrency {concurrency}" if concurrency else "a request rate"
        count = concurrency or 1
        return len(self.untimed(count, count, api, f"the warm-up before a probe at {shown}"))

    def pilot(self, requests: int) -> list[RequestResult]:
        """`requests` one at a time: what c=1 costs before the concurrency search
        (docs/method.md#capacity-search)."""
        return self.untimed(requests, 1, self.api, "the pilot at concurrency 1")

    def probe(self, mode: str, load: float, window: Window | None = None) -> Probe:
        """Windowed passes at `load` until the verdict is met or missed, the client was the limit,
        the pool ran out or capacity.repeats passes were run, all drawing on one run of distinct
        requests (a trace: its requests, replayed once a pass)."""
        closed, users = mode in COUNTED, mode in IN_SESSIONS
        replay = mode == "request_rate" and self.trace is not None
        if closed:
            arrivals = None
        elif replay:  # the trace's own arrivals, sped up to `load` req/s
            arrivals = TraceArrivals(self.trace.arrival_s, load / self.trace.rate)
        else:  # vLLM's gamma gaps
            arrivals = Arrivals(load, self.load_settings["burstiness"])
        window = window or self.window
        requests = iter(()) if users else None if replay else self.supply.take()
        target, slo_ms, repeats = self.settings["attainment"], self.load_settings["slo_ms"], self.settings["repeats"]
        api = "chat" if users else self.api
        warmed = self.warm_up(int(load) if closed else None, api) if self.load_settings["warmup"] else 0
        passes: list[PassRecord] = []
        stalled: list[PassRecord] = []  # measured again: not pooled
        met_slo_so_far = counted_so_far = 0  # pooled over the passes so far
        out_of_time = False
        while len(passes) < repeats:
            index = len(passes) + len(stalled)
            if index and self.budget.out():
                out_of_time = True
                break
            settled = missed_whatever_follows(
                met_slo_so_far, counted_so_far, window.min_requests, target, slo_ms, self.rule
            )
            measured = measure_pass(
                self.server,
                iter([load_request(r, index) for r in self.trace_rows]) if replay else requests,
                what=f"probe {mode} {load:g}",
                pool=None
                if replay or users
                else f"{len(self.supply.rows)} distinct requests in this search's share of request_pool.jsonl",
                fix="lower capacity.max_concurrency",
                window=replace(window, settled=settled, deadline=self.budget.deadline),
                concurrency=int(load) if closed else None,
                arrivals=arrivals,
                seed=self.seed + index,
                interval_s=self.load_settings["metrics_interval_s"],
                timeout_s=self.timeout_s,
                api=api,
                users=self.sessions if users else None,
                processes=window_processes(self.load_settings),
            )
            out_of_time |= measured.run.closed_at_deadline
            rows = probe_rows(
                measured.run, mode=mode, load=load, api=api, burstiness=self.load_settings["burstiness"],
                trace_scale=arrivals.scale if replay else None, pass_number=index + 1, slo_ms=slo_ms,
            )  # fmt: skip
            last = PassRecord.of(measured, slo_ms, int(load) if mode == "users" else None, index + 1)
            exhausted = last.measured.run.exhausted and not replay  # a pool run dry has nothing to measure again
            if (
                last.stalled
                and len(stalled) < STALL_RETRIES
                and not (out_of_time or self.budget.out() or exhausted or last.saturated)
            ):
                stalled.append(last)
                self.requests += [{**row, "counted": False} for row in rows]
                self.progress(
                    f"probe {load_text(mode, load)}: pass {index + 1} measured again: the client's event loop woke "
                    f"{measured.run.loop_late_s * MS:.0f} ms late (over {stall_limit_ms(slo_ms):.0f} ms)"
                )
                continue
            self.requests += rows
            passes.append(last)
            met_slo_so_far, counted_so_far = met_slo_so_far + last.met_slo, counted_so_far + last.requests
            # A trace replay ends with the trace: its passes pool until decided, as others do.
            # A pass whose client was the limit can never make the probe met: no more passes.
            if (
                last.client_behind
                or last.client_busy
                or last.stalled
                or verdict(met_slo_so_far, counted_so_far, target, last.saturated, rule=self.rule) != "undecided"
                or exhausted
            ):
                break
        record = probe_record(passes, repeats, target, out_of_time, self.rule)
        record["mode"] = mode
        record["trace_scale"] = arrivals.scale if isinstance(arrivals, TraceArrivals) else None
        record["window"] = {"seconds": window.seconds, "min_requests": window.min_requests}
        record["trace_replay"] = replay
        record["warmup_requests"] = warmed
        record["stalled_passes"] = [p.to_json() for p in stalled]
        if replay:
            record["supply_exhausted"] = False  # the trace's end closes each pass
        decision = record["decision"]
        # Undecided, a probe steers the search by its share, except where the client was the limit
        # or too few requests were counted to be met: no evidence of met.
        met = decision == "met" or (
            decision == "undecided"
            and record["attainment"] >= target
            and not record["client_limited"]
            and not record["too_few_to_meet"]
        )
        self.progress(probe_line(load_text(mode, load), record, window, met))
        return Probe(load, met, record, decided=decision != "undecided", client_limited=record["client_limited"])
