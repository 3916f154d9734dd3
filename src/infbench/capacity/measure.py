"""SLO capacity measured on a running server: the highest concurrency (closed loop) and request
rate (open loop) at which at least `attainment` of requests meet every SLO of `load.slo_ms`,
each search (`capacity.search`) over probes (`capacity.probe`) within capacity.max_search_s.
See docs/method.md#capacity-search, #capacity-estimate and #capacity-time-budget.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace

import httpx

from infbench.capacity.estimate import capacity_estimate, rerun_interval
from infbench.capacity.probe import Prober, Rule, TimeBudget, client_evidence
from infbench.capacity.search import Probe, binding_limit, search
from infbench.core.capacity_terms import BELOW, COUNTED, SEARCHES, as_number
from infbench.core.metrics import MS
from infbench.engines.external_endpoint import EndpointError
from infbench.engines.server_metrics import server_kv_facts
from infbench.engines.vllm_server import ServerError
from infbench.kv.capacity_bounds import kv_full_usage, kv_limit_agreement, predicted_kv_concurrency
from infbench.serving.client import LoadRequest, load_request
from infbench.serving.sessions import SessionPlan
from infbench.serving.window import Window
from infbench.workload.sessions import turn_footprints

# Open-loop windows last at least this many median E2E latencies (of the closed loop at its
# capacity): long enough for a queue to build where the server cannot keep up.
LONG_PASS = 10


def rate_window(settings: dict, concurrency_record: dict) -> Window:
    """The rate search's window: at least LONG_PASS median E2E latencies of the closed loop at
    its capacity (at its lowest probe where none met), and at least capacity.window_s."""
    at = concurrency_record["at_capacity"] or min(concurrency_record["probes"], key=lambda p: p["load"])
    latency_s = (at.get("median_e2el_ms") or 0.0) / MS
    return Window(max(settings["window_s"], LONG_PASS * latency_s), settings["window_requests"])


def fitted_capacity(probes: list[Probe], target: float, mode: str, seed: int) -> dict:
    """The capacity estimate (capacity.estimate) over a search's probes, held to those decided.
    A saturated probe's requests met the SLO only on their way into a queue without bound: none
    counts. A probe whose client was the limit did not measure the server, and one with too few
    requests to be met measured no attainment: both are left out (docs/method.md#capacity-estimate)."""
    offered = [p for p in probes if not p.client_limited and not p.record.get("too_few_to_meet")]
    return capacity_estimate(
        [(p.load, 0 if p.record["saturated"] else p.record["met_slo"], p.record["requests"]) for p in offered],
        target,
        integer=mode in COUNTED,
        seed=seed,
        met=max((p.load for p in offered if p.decided and p.met), default=None),
        missed=min((p.load for p in offered if p.decided and not p.met), default=None),
    )


# The pilot before the concurrency search: this many requests at c=1, outputs cut as a
# warm-up's; where their median TTFT or TPOT takes more than NEAR_SLO of its SLO, the search
# starts at 1 rather than at capacity.start_concurrency (docs/method.md#capacity-search).
PILOT_REQUESTS = 3
NEAR_SLO = 0.5


def search_start(prober: Prober, configured: int, slo_ms: dict) -> dict:
    """The concurrency search's start: 1 where the pilot sits near the SLO, else `configured`
    (no pilot where that is 1 already or the SLO has no TTFT or TPOT); what the pilot measured
    and why. `first_probe` is set by the search's record."""
    keys = [key for key in ("ttft", "tpot") if key in slo_ms]
    unchanged = {"load": configured, "configured": configured, "pilot": None, "why": "capacity.start_concurrency"}
    if configured <= 1 or not keys:
        return unchanged
    results = prober.pilot(PILOT_REQUESTS)
    succeeded = [r for r in results if r.success]
    shares = {}
    for key in keys:
        values = [getattr(r, key) for r in succeeded if getattr(r, key) is not None]
        if values:
            shares[key] = statistics.median(values) * MS / slo_ms[key]
    pilot = {"requests": len(results), "succeeded": len(succeeded), "slo_share": shares}
    near = {key: share for key, share in shares.items() if share > NEAR_SLO}
    if near:
        said = " and ".join(f"{share * 100:.0f} % of the {key.upper()} SLO" for key, share in near.items())
        return {**unchanged, "load": 1, "pilot": pilot, "why": f"c=1 already takes {said}: starting at 1"}
    why = "c=1 sits well within the SLO" if shares else f"the pilot measured nothing ({len(succeeded)} succeeded)"
    return {**unchanged, "pilot": pilot, "why": f"{why}: starting at capacity.start_concurrency"}


class ServerSearches:
    """A running server's capacity searches: its prober (within capacity.max_search_s a search,
    or `budget`), its KV prediction, and each search's steps (capacity.search.search_steps) and
    record."""

    def __init__(
        self,
        server,
        workload: list[dict],
        pool: list[dict],
        settings: dict,
        load_settings: dict,
        kv: dict | None,
        *,
        max_model_len: int,
        max_num_seqs: int | None,
        seed: int,
        timeout_s: float,
        sessions: SessionPlan | None = None,
        budget: TimeBudget | None = None,
        progress=print,
    ):
        self.settings, self.kv, self.max_num_seqs, self.seed = settings, kv, max_num_seqs, seed
        # Its own capacity.max_search_s a search, unless given one shared with other servers' searches.
        self.budget = budget or TimeBudget(settings["max_search_s"])
        self.owns_budget = budget is None  # a budget shared with other servers' searches runs on
        self.prober = Prober(
            server, workload, pool, settings, load_settings, seed=seed, timeout_s=timeout_s, budget=self.budget,
            sessions=sessions, progress=progress,
        )  # fmt: skip
        # An endpoint without /metrics (kv None) has no pool to predict from: the search starts unseeded.
        # The prediction in the order the search draws its rows; the KV classification and the
        # KV-limit bounds over the whole pool.
        self.predicted = (
            predicted_kv_concurrency([load_request(r, 0) for r in self.prober.supply.rows], kv, max_model_len)
            if kv
            else None
        )
        self.pool_requests = [load_request(r, 0) for r in pool]
        self.start: dict | None = None  # the concurrency search's first load and why (concurrency_steps)
        # The KV usage at which the largest request (a users search: the largest turn) no longer fits.
        self.full_usage = dict.fromkeys(("concurrency", "request_rate"), kv_full_usage(self.pool_requests, kv))
        if sessions is not None:
            self.full_usage["users"] = self.full_usage["session_rate"] = kv_full_usage(session_turns(sessions), kv)

    def steps(self, mode: str, *, start: float, floor: float, ceiling: float, kv_limit: int | None = None) -> dict:
        """search_steps' settings for one search of `mode`."""
        return {
            "start": start, "floor": floor, "ceiling": ceiling, "integer": mode in COUNTED,
            "tolerance": self.settings["tolerance"], "max_probes": self.settings["max_probes"], "kv_limit": kv_limit,
            "out_of_time": self.budget.out,
        }  # fmt: skip

    def concurrency_steps(self) -> dict:
        """The concurrency search's: from capacity.start_concurrency, a predicted KV limit below
        it first, or from 1 where a pilot at c=1 already sits near the SLO (search_start)."""
        self.start = search_start(self.prober, self.settings["start_concurrency"], self.prober.load_settings["slo_ms"])
        if self.start["pilot"] is not None:
            self.prober.progress(f"concurrency search: {self.start['why']}")
        steps = self.steps(
            "concurrency",
            start=self.start["load"],
            floor=1,
            ceiling=self.settings["max_concurrency"],
            kv_limit=self.predicted["value"] if self.predicted else None,
        )
        # The doublings from 1 up to the configured start are probes that start would not have
        # needed: a pilot that misjudges (latency that barely grows with load) costs their time,
        # not the bracket.
        steps["max_probes"] += round(math.log2(self.start["configured"] / self.start["load"]))
        return steps

    def lowered_by(self, first: float) -> str:
        """What took the concurrency search's first probe below its start (search_steps)."""
        if self.predicted and first == self.predicted["value"]:
            return "the predicted KV-limited concurrency"
        return "capacity.max_concurrency"

    def record(self, mode: str, result, seconds: float) -> dict:
        """A finished search's record: its probes and outcome, the limit that bound it, its estimate."""
        by_load = {p.load: p.record for p in result.probes}
        # The limit is read where the SLO broke (the first failing probe), else at the highest probe.
        where = result.first_failing if result.first_failing is not None else max(by_load)
        record = result.to_json()
        record["search_s"] = seconds
        record["max_search_s"] = self.budget.seconds  # a budget shared by several searches: all of it
        if by_load[where]["client_limited"]:
            binding = {"limit": "client", "evidence": client_evidence(by_load[where])}
        else:
            binding = binding_limit(by_load[where], kv_full_usage=self.full_usage[mode], max_num_seqs=self.max_num_seqs)
        record["binding"] = {"at": where, **binding}
        predicted = self.predicted
        record["kv_limit"] = (
            kv_limit_agreement(
                by_load[where]["peak_num_requests_running"], self.pool_requests, self.kv, predicted["value"]
            )  # fmt: skip
            if mode == "concurrency" and predicted and binding["limit"] == "kv_memory"
            else None
        )
        if mode == "concurrency":
            first = result.probes[0].load
            lowered = "" if first == self.start["load"] else f"; lowered to {first:g} by {self.lowered_by(first)}"
            record["start"] = {**self.start, "first_probe": first, "why": self.start["why"] + lowered}
        record["at_capacity"] = by_load.get(result.capacity)
        record["estimate"] = fitted_capacity(result.probes, self.settings["attainment"], mode, self.seed)
        return record

    def search(self, mode: str, steps: dict, window: Window | None = None) -> dict:
        """One search of `mode` within its own capacity.max_search_s (a shared budget: what is
        left of it, never restarted): its record."""
        started = self.budget.start() if self.owns_budget else time.perf_counter()
        result = search(lambda load: self.prober.probe(mode, load, window), **steps)
        return self.record(mode, result, time.perf_counter() - started)


def search_capacity(
    server,
    workload: list[dict],
    pool: list[dict],
    settings: dict,
    load_settings: dict,
    kv: dict,
    *,
    max_model_len: int,
    max_num_seqs: int | None,
    seed: int,
    timeout_s: float,
    sessions: SessionPlan | None = None,
    max_users: int = 256,
    session_rate: bool = False,
    progress=print,
) -> dict:
    """The concurrency search (seeded by the KV prediction), then the rate search (seeded by the
    request rate served at the concurrency capacity, up to the highest completion rate), then
    with `sessions` the users search (seeded by Little's law from the concurrency capacity),
    each with its capacity estimate and interval and the limit that binds it."""
    searches = ServerSearches(
        server, workload, pool, settings, load_settings, kv, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        seed=seed, timeout_s=timeout_s, sessions=sessions, progress=progress,
    )  # fmt: skip
    prober, predicted = searches.prober, searches.predicted
    found = {"decision_rule": Rule.of(settings).to_json(), "predicted_kv_concurrency": predicted}
    if predicted:
        progress(f"concurrency search: predicted KV-limited concurrency {predicted['value']}")
    concurrency = found["concurrency"] = searches.search("concurrency", searches.concurrency_steps())
    if settings["rate"]:
        served = concurrency["at_capacity"]
        window = rate_window(settings, concurrency)
        progress(f"rate search: windows of {window.seconds:.1f} s (at least {LONG_PASS} median latencies)")
        # Little's law: the closed loop at its capacity completed requests at this rate. The
        # ceiling: the most any closed-loop probe completed (past it an open loop's queue grows).
        start = max(served["request_throughput"]["mean"] if served else 0.0, settings["min_rate"])
        highest = max((p["request_throughput"]["mean"] for p in concurrency["probes"]), default=0.0)
        steps = searches.steps("request_rate", start=start, floor=settings["min_rate"], ceiling=max(start, highest))
        rate = found["request_rate"] = searches.search("request_rate", steps, window)
        # With a trace, a rate is the trace's own rate times a scale: the capacity as that scale.
        rate["trace_rate"] = prober.trace.rate if prober.trace is not None else None
    if sessions is not None:
        predicted_users = users_from_concurrency(concurrency, sessions.think.mean_s, max_users)
        progress(
            f"users search: {predicted_users['value']} users predicted from the concurrency capacity by Little's law"
        )
        users = found["users"] = searches.search(
            "users", searches.steps("users", start=predicted_users["value"], floor=1, ceiling=max_users)
        )
        users["predicted_from_concurrency"] = predicted_users
        users["predicted_kv"] = users_kv_limit(sessions, kv, max_model_len, users) if kv else None
        if session_rate:
            plan = sessions_from_users(users, concurrency, sessions, settings["min_rate"])
            prober.sessions = replace(sessions, ramp_s=plan["ramp_s"])
            progress(
                f"session rate search: {plan['start']:.2f} new sessions/s predicted from the users capacity by "
                f"Little's law; each pass's ramp {plan['ramp_s']:.1f} s"
            )
            steps = searches.steps("session_rate", start=plan["start"], floor=settings["min_rate"],
                                   ceiling=plan["ceiling"])  # fmt: skip
            sessions_rate = found["session_rate"] = searches.search("session_rate", steps)
            sessions_rate["predicted_from_users"] = plan
    found["requests"] = prober.requests  # every probe's requests (request_table rows)
    return found


def users_from_concurrency(concurrency: dict, think_s: float, ceiling: int) -> dict:
    """The users search's start: Little's law from the concurrency capacity C, users = C x (R + Z)
    / R, with R = C / X the mean response time there (X its completed requests a second) and Z
    the mean think time (docs/method.md#sessions); 1 where no concurrency met the SLO."""
    at = concurrency["at_capacity"]
    completed = at["request_throughput"]["mean"] if at else 0.0
    if not completed:
        return {"value": 1, "in_flight": None, "response_s": None, "think_s": think_s}
    response_s = concurrency["capacity"] / completed
    value = max(1, min(ceiling, round(concurrency["capacity"] * (response_s + think_s) / response_s)))
    return {"value": value, "in_flight": concurrency["capacity"], "response_s": response_s, "think_s": think_s}


def sessions_from_users(users: dict, concurrency: dict, sessions: SessionPlan, floor: float) -> dict:
    """The session rate search's start, ceiling and ramp (docs/method.md#sessions): from the users
    capacity U with R and Z measured there, U / (T x (R + Z)) new sessions a second (T the turns
    a conversation holds on average), at which sessions keep as many turns in flight as U users
    did, `floor` (capacity.min_rate) where no users probe met; the ceiling, the most requests or
    turns a second any closed-loop probe completed, over T (past it a queue grows), at least the
    start; the ramp, the 90th percentile of the conversations' durations t x R + (t - 1) x Z (t
    its turns), by which the sessions alive are near their steady number."""
    held = [len(turn_footprints(c, sessions.reply, sessions.max_model_len)) for c in sessions.conversations]
    per_session = sum(held) / len(held)
    at = users["at_capacity"]
    highest = (
        max(probe["request_throughput"]["mean"] for probe in users["probes"] + concurrency["probes"]) / per_session
    )
    if at is None:
        start, response_s, think_s = floor, None, None
    else:
        response_s, think_s = at["sessions"]["mean_response_s"], at["sessions"]["mean_think_s"] or 0.0
        start = max(floor, users["capacity"] / (per_session * (response_s + think_s)))
    durations = sorted(t * (response_s or 0.0) + (t - 1) * (think_s or 0.0) for t in held)
    return {
        "start": start,
        "ceiling": max(start, highest),
        "ramp_s": durations[int(0.9 * (len(durations) - 1))],
        "turns_per_session": per_session,
    }


def session_turns(sessions: SessionPlan) -> list[LoadRequest]:
    """Every conversation's turns in order, each at its footprint (workload.sessions.turn_footprints)."""
    return [
        LoadRequest(conversation.id, "", prompt, output)
        for conversation in sessions.conversations
        for prompt, output in turn_footprints(conversation, sessions.reply, sessions.max_model_len)
    ]


def users_kv_limit(sessions: SessionPlan, kv: dict, max_model_len: int, search: dict) -> dict:
    """The KV simulator's prediction for sessions (docs/method.md#sessions): the turns that fit
    the pool at once at their peak footprints, each turn's prompt carrying its conversation so
    far (every conversation's turns in order), and the users that many in flight would be by
    Little's law with the R and Z measured at the users capacity (at the lowest probe where none
    met). Thinking users hold no blocks (with prefix caching their cached blocks are evictable)."""
    in_flight = predicted_kv_concurrency(session_turns(sessions), kv, max_model_len)
    at = search["at_capacity"] or min(search["probes"], key=lambda probe: probe["load"])
    response_s, think_s = at["sessions"]["mean_response_s"], at["sessions"]["mean_think_s"]
    users = in_flight["value"] * (response_s + think_s) / response_s if response_s and think_s is not None else None
    return {
        "in_flight": in_flight["value"],
        "mean_blocks_per_turn": in_flight["mean_blocks_per_request"],
        "users": users,
        "response_s": response_s,
        "think_s": think_s,
        "formula": f"{in_flight['formula']}, over every conversation's turns; users = that x (R + Z) / R",
    }


def search_runs(runs: int, new_server, search_on, progress=print) -> dict:
    """capacity.runs runs one after another, each `search_on(server, kv)` on a server of its own
    from `new_server(run)`, run counted from 1 (started, and stopped before the next starts):
    `across_runs` of their records. `kv`: the server's KV facts where it publishes /metrics,
    else None. Of several runs, once one has completed, a later one whose server or endpoint
    fails is recorded as failed and the others go on (as AIPerf's multi-run does); a failure
    before any run completed ends the stage (it would recur). `requests`: every run's probes'
    requests, as request_table rows numbered by run."""
    records, failed, requests = [], [], []
    for index in range(runs):
        if runs > 1:
            progress(f"capacity run {index + 1} of {runs}, on a server started for it")
        started = time.time()
        try:
            with new_server(index + 1) as server:
                kv = server_kv_facts(server.base_url) if server.metrics else None
                found = search_on(server, kv)
            requests += [{**row, "run": index + 1} for row in found.pop("requests")]
        except (ServerError, EndpointError, httpx.HTTPError) as error:
            if not records:
                raise
            progress(f"capacity run {index + 1} of {runs} failed: {error}".splitlines()[0])
            failed.append({"run": index + 1, "error": str(error).splitlines()[0]})
            continue
        records.append({**found, "run": index + 1, "kv": kv, "started": started, "seconds": time.time() - started})
    return {
        **across_runs(records, several=runs > 1),
        **({"failed_runs": failed} if failed else {}),
        "requests": requests,
    }


def run_value(search: dict) -> float:
    """A run's fitted capacity as a number for ordering runs: off its probed range as infinities,
    none measured lowest."""
    value = (search.get("estimate") or {}).get("value")
    return BELOW if value is None else as_number(value)


def across_runs(records: list[dict], several: bool | None = None) -> dict:
    """One run's record as the headline, the median run by its fitted concurrency capacity (the
    lower of the middle two where the runs are even), with every run's capacities and each
    search's rerun interval where `several` runs were asked for (by default: given), however
    many completed (docs/method.md#capacity-reruns)."""
    kept = [key for key in records[0] if key not in ("run", "started", "seconds")]
    if not (len(records) > 1 if several is None else several):
        return {key: records[0][key] for key in kept}
    ordered = sorted(range(len(records)), key=lambda i: run_value(records[i]["concurrency"]))
    middle = ordered[(len(records) - 1) // 2]
    headline = {key: records[middle][key] for key in kept}
    modes = [mode for mode in SEARCHES if mode in headline]
    headline["runs"] = [
        {
            "run": record["run"],
            "started": record["started"],
            "seconds": record["seconds"],
            "headline": index == middle,
            **{
                mode: {
                    "capacity": record[mode]["capacity"],
                    "first_failing": record[mode]["first_failing"],
                    "outcome": record[mode]["outcome"],
                    "estimate": {
                        key: record[mode]["estimate"][key]
                        for key in ("value", "ci95", "lowest_probe", "highest_probe")
                        if key in record[mode]["estimate"]
                    },
                }
                for mode in modes
            },
        }
        for index, record in enumerate(records)
    ]
    headline["rerun_interval"] = {
        mode: rerun_interval(
            [record[mode]["estimate"]["value"] for record in records],
            [record[mode]["estimate"]["ci95"] for record in records],
            integer=mode in COUNTED,
        )
        for mode in modes
    }
    return headline


def cost_per_million_output_tokens(per_hour: float | None, output_throughput: float | None) -> float | None:
    """cost per hour / (output tokens per second x 3600) x 10^6, at the SLO capacity."""
    if per_hour is None or not output_throughput:
        return None
    return per_hour / (output_throughput * 3600) * 1e6
