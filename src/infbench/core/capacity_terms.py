"""How a capacity search's results are worded, shared by the capacity package (which states its
checks in these words) and the report (which shows them): the ways a search ends, what would
fix each, the share of a window a client may fall behind by, the rule that decides a probe,
and a load or capacity as text; and which capacity settings a concurrency search reads."""

from __future__ import annotations

import math

# What a concurrency search on a running server (capacity.measure.ServerSearches) reads of the
# capacity settings: the variants rule passes only these, so that no other capacity setting
# reruns it. Here, not in capacity.measure, so that the workflow reads it without importing the
# measurement code (0.6 s a Snakemake start).
CONCURRENCY_SEARCH_KEYS = (
    "attainment", "decision", "confidence", "window_s", "window_requests", "repeats", "start_concurrency",
    "max_concurrency", "max_probes", "max_search_s", "tolerance",
)  # fmt: skip

BELOW, ABOVE = -math.inf, math.inf  # a capacity's crossing lies below the lowest probe / above the highest

# The searches a capacity record may hold, as the report names them.
SEARCHES = {
    "concurrency": "requests in flight",
    "request_rate": "request rate",
    "users": "users in chat sessions",
    "session_rate": "new chat sessions a second",
}
# The searches over a whole number of requests or users; the others search a rate.
COUNTED = ("concurrency", "users")
# The searches of chat sessions, decided per turn (docs/method.md#sessions).
IN_SESSIONS = ("users", "session_rate")


def as_number(value: float | str) -> float:
    """A crossing from JSON (capacity/estimate.py's `shown` inverted): "below" and "above" as infinities."""
    return {"below": BELOW, "above": ABOVE}.get(value, value)


# How a search ended. Only `bracketed` is converged: both ends of the bracket were probed and
# decided, and it is as narrow as the tolerance asks.
OUTCOMES = {
    "bracketed": "converged: a met and a missed load within the tolerance",
    "none_met": "not converged: even the lowest load missed the SLO, so the capacity is below it",
    "ceiling_met": "not converged: the highest load allowed met the SLO, so the capacity is at least that",
    "unfinished": "not converged: max_probes ran out before a met and a missed load were within the tolerance",
    "undecided": "not converged: an end of the bracket was undecided, its attainment interval straddling the target",
    "client_limited": "not converged: the client was the limit at the failing load (it fell behind its schedule, "
    "used most of a core or stalled), so the server was not measured there",
    "out_of_time": "not converged: capacity.max_search_s ran out before a met and a missed load were decided within "
    "the tolerance",
}

OUTCOME_FIXES = {
    "none_met": "loosen load.slo_ms or capacity.attainment (the rate search: or lower capacity.min_rate)",
    "ceiling_met": "raise capacity.max_concurrency (the rate search stops at the closed loop's best completion rate; "
    "the users search at sessions.max_users)",
    "unfinished": "raise capacity.max_probes or capacity.tolerance",
    "undecided": "raise capacity.repeats, capacity.window_s or capacity.window_requests (more counted requests "
    "narrow the interval; a probe too few to be met needs them)",
    "client_limited": "a load the client cannot send or read in time says nothing of the server: the capacity "
    "probes run one client process, which on a machine whose cores the engine uses shares them; run the client on "
    "another machine against server.external",
    "out_of_time": "raise capacity.max_search_s (where the capacity is a few requests in flight, each probe's "
    "windows take minutes to count their requests)",
}

# An open-loop pass whose send lag grew over its window by more than this share of the window
# (the median lag of the last tenth of its counted sends against the first tenth's) did not
# offer its rate: the client sent at under about 90 % of it. A steady delay does not grow, and
# a burst sent one request after another adds milliseconds, not a tenth of a window.
LAG_GROWTH_BEHIND = 0.1
# A users pass whose users' think time as taken (from a turn's end to the user's next send),
# averaged over its counted turns, exceeds the one drawn by more than this share: the client
# was late to its users' turns, so it offered less load than its users (docs/method.md#sessions).
THINK_LATE = 0.1
# A pass whose client's event loop woke later than this share of the SLO's TTFT limit (of its
# smallest limit where it sets none; at least STALL_FLOOR_MS) stalled: for that long no stream was
# read, so every timestamp taken then carries the delay. A probe measures a stalled pass again,
# at most STALL_RETRIES times (docs/method.md#client-limited-probes).
STALL_SHARE = 0.1
STALL_FLOOR_MS = 100.0
STALL_RETRIES = 2

# A users pass whose users, as Little's law gives them from what it measured, differ from the
# users it ran by more than this share did not hold its users (docs/method.md#sessions).
USERS_HELD = 0.2
# ... judged only where the window spans at least this many of a user's cycles (a turn and its
# think time, R + Z): in a shorter one, a turn whose think time outlasts what is left of the window
# is sent after it closes, uncounted, so the counted think times are the short ones and Little's
# law reads low.
HELD_CYCLES = 5


def stall_limit_ms(slo_ms: dict) -> float:
    base = slo_ms.get("ttft", min(slo_ms.values(), default=0.0))
    return max(STALL_SHARE * base, STALL_FLOOR_MS)


def load_text(mode: str, load) -> str:
    if load is None:
        return "none"
    if mode == "users":
        return f"{int(load)} users"
    if mode == "session_rate":
        return f"{load:.3g} sessions/s"
    return f"c={int(load)}" if mode == "concurrency" else f"{load:.2f} req/s"


def undecided_ends(search: dict) -> list[bool]:
    """[passing, failing]: whether each end of the bracket is a load its last probe left undecided."""
    last = {probe["load"]: probe for probe in search.get("probes", [])}  # the last probe of a load decides it
    ends = (search["capacity"], search["first_failing"])
    return [end is not None and not last.get(end, {}).get("decided", True) for end in ends]


def undecided_bound(mode: str, search: dict) -> str | None:
    """A bracket with an undecided end as the bound its decided end gives, without an interval
    (docs/method.md#capacity-convergence); None where both ends were decided."""
    passing, failing = search["capacity"], search["first_failing"]
    shaky = undecided_ends(search)
    if not any(shaky):
        return None
    if shaky == [True, False] and failing is not None:
        bound = load_text(mode, failing - 1 if mode in COUNTED else failing)  # a rate: at most the missed
        text = f"at most {bound}, undecided ({load_text(mode, passing)} was not decided met)"
    elif shaky == [False, True] and passing is not None:
        text = f"at least {load_text(mode, passing)}, undecided above ({load_text(mode, failing)} was not decided)"
    elif all(shaky):
        text = f"undecided between {load_text(mode, passing)} and {load_text(mode, failing)} (neither was decided)"
    else:
        text = f"undecided ({load_text(mode, passing if failing is None else failing)} was not decided, the only end)"
    return text + (" (capacity.max_search_s ran out)" if search["outcome"] == "out_of_time" else "")


def capacity_text(mode: str, search: dict) -> str:
    """The capacity, a lower bound where the search's ceiling itself met the SLO (nothing above
    it was tested): capacity.max_concurrency, or for rate the most requests per second a
    closed-loop probe completed, the highest rate probed; a bound where an end is undecided."""
    text = load_text(mode, search["capacity"])
    if search["outcome"] != "client_limited" and undecided_bound(mode, search):
        return undecided_bound(mode, search)
    if search["outcome"] == "client_limited":
        untested = load_text(mode, search["first_failing"])
        if search["capacity"] is None:
            return f"not measured (the client was the limit at {untested}, the lowest load probed)"
        return f"at least {text} (the client was the limit at {untested}, so the server was not measured there)"
    if search["outcome"] == "unfinished" and search["first_failing"] is None and search["capacity"] is not None:
        return f"at least {text} (the search ran out of capacity.max_probes before a load missed the SLO)"
    if search["outcome"] == "out_of_time":
        if search["capacity"] is None:
            lowest = load_text(mode, search["first_failing"])
            return f"below {lowest} (capacity.max_search_s ran out before a load met the SLO)"
        if search["first_failing"] is None:
            return f"at least {text} (capacity.max_search_s ran out before a load missed the SLO)"
        return f"{text} (capacity.max_search_s ran out before the bracket was decided)"
    if search["outcome"] != "ceiling_met":
        return text
    if mode == "concurrency":
        return f"at least {text}, not tested above (capacity.max_concurrency met the SLO)"
    if mode == "users":
        return f"at least {text}, not tested above (sessions.max_users met the SLO)"
    if mode == "session_rate":
        return (
            f"at least {text}, not tested above (the closed loops' best completion rate over a session's turns, the "
            "highest probed, met the SLO)"
        )
    return (
        f"at least {text}, not tested above (the closed loop's best completion rate, the highest probed, met the SLO)"
    )


def rule_text(rule: dict | None, target: float) -> str:
    """How the probes were decided (capacity.json's decision_rule; absent: Wilson, the rule
    before there was a choice) and why that rule (docs/method.md#capacity-decisions,
    #early-stopping)."""
    if rule and rule["name"] == "early_stopping":
        return (
            f"A load is served when MLPerf LoadGen's early-stopping rule says, at confidence {rule['confidence']:g}, "
            f"that at least {100 * target:g} % of requests meet the SLO: its counted requests are at least n(t) for "
            "the t of them that missed, and it misses when the mirror test says fewer do (capacity.decision: "
            "early_stopping, the rule MLPerf decides a percentile latency bound by; LoadGen applies it once to a "
            "finished run, here it is re-checked after each window)."
        )
    return (
        f"A load is served when the 95 % Wilson interval of its share of requests meeting it lies at or above "
        f"{100 * target:g} % (capacity.decision: wilson, the default: it decides with the fewest requests, 35 at 0.9, "
        "which the default run's time budget rests on; early_stopping is MLPerf's rule, which needs more)."
    )


def rerun_text(mode: str, capacity: dict) -> str:
    """Where a rerun's fitted capacity falls (capacity.runs from 2), e.g. `a rerun: c=3 to c=9
    (95 % prediction over 3 runs: c=4, c=6, c=5)`; with one run, that it was not measured."""
    interval = (capacity.get("rerun_interval") or {}).get(mode)
    if not interval:
        return "not measured: one run (capacity.runs: 3 adds it)"
    values = ", ".join(v if isinstance(v, str) else load_text(mode, v) for v in interval["values"])
    if interval["runs"] < 2:
        return f"not measured: {interval['runs']} run completed ({values})"
    if interval["ci95"] is None:
        off = "a run's capacity or its interval lies off its probed range"
        return f"no interval: {off} ({interval['runs']} runs: {values})"
    low, high = interval["ci95"]
    # Below one request in flight (or user): a rerun may meet the SLO at no load at all.
    shown = f"below {load_text(mode, 1)}" if mode in COUNTED and low < 1 else load_text(mode, low)
    return f"{shown} to {load_text(mode, high)} (95 % prediction over {interval['runs']} runs: {values})"
