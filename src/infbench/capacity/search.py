"""The SLO capacity search, apart from any server: bracketing then bisection over a load
(closed-loop concurrency or open-loop request rate) whose probes each say whether at least the
target share of requests met every SLO, within a probe count and a time budget; and the limit
that bound the server where the SLO broke. See docs/method.md#capacity-search,
#capacity-convergence, #capacity-time-budget and #binding-limit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

Z_95 = 1.959964


def wilson_interval(successes: int, n: int) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = Z_95**2
    centre = p + z2 / (2 * n)
    half = Z_95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At p = 0 or 1 the closed form gives the end exactly but for rounding: pin it.
    low = 0.0 if successes == 0 else (centre - half) / (1 + z2 / n)
    high = 1.0 if successes == n else (centre + half) / (1 + z2 / n)
    return (low, high)


def binomial_cdf(k: int, n: int, q: float) -> float:
    """P[Binomial(n, q) <= k], summed term by term in logs over the shorter tail (the upper one
    as 1 - P[Binomial(n, 1 - q) <= n - k - 1]): a probe re-checks it at each finished request."""
    if k >= n or q <= 0:
        return 1.0
    if q >= 1 or k < 0:
        return 0.0
    if k > n // 2:
        return max(0.0, 1.0 - binomial_cdf(n - k - 1, n, 1 - q))
    log_n = math.lgamma(n + 1)
    return min(
        1.0,
        sum(
            math.exp(log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(q) + (n - i) * math.log1p(-q))
            for i in range(k + 1)
        ),
    )


@functools.lru_cache(maxsize=4096)
def early_stopping_n(t: int, p: float, c: float) -> int:
    """MLPerf LoadGen's early stopping (loadgen/early_stopping.cc, server scenario): the fewest
    requests n with t of them over the bound for which the p-th percentile is within it at
    confidence c, the least n with P[Binomial(n, 1 - p) <= t] < 1 - c
    (docs/method.md#early-stopping)."""
    low = high = t + 1
    while binomial_cdf(t, high, 1 - p) >= 1 - c:
        high *= 2
    while low < high:  # the probability falls as n grows: bisect for the least n below 1 - c
        middle = (low + high) // 2
        low, high = (low, middle) if binomial_cdf(t, middle, 1 - p) < 1 - c else (middle + 1, high)
    return low


def early_stopping_table(c: float = 0.99, percentiles=(0.99, 0.9), over=(0, 1, 2, 5, 10, 20, 50, 100)) -> str:
    """docs/method.md's n(t) table, in Markdown: a column of early_stopping_n per percentile."""
    rows = [f"| t | {' | '.join(f'n(t), p = {p:g}' for p in percentiles)} |", "|---:|" + "---:|" * len(percentiles)]
    rows += [f"| {t} | {' | '.join(f'{early_stopping_n(t, p, c):,}' for p in percentiles)} |" for t in over]
    return "\n".join(rows)


@dataclass
class Probe:
    """One probed load: whether its pooled attainment met the target, with everything measured."""

    load: float
    met: bool
    record: dict = field(default_factory=dict)
    decided: bool = True  # False: the interval straddled the target; `met` is the point estimate
    client_limited: bool = False  # the client, not the server, was the limit (never met)


@dataclass
class SearchResult:
    capacity: float | None  # the last passing load; None when even the lowest failed
    first_failing: float | None  # None when the ceiling passed (capacity at least the ceiling)
    probes: list[Probe]
    outcome: str  # a key of core.capacity_terms.OUTCOMES

    @property
    def converged(self) -> bool:
        return self.outcome == "bracketed"

    def to_json(self) -> dict:
        return {
            "capacity": self.capacity,
            "first_failing": self.first_failing,
            "converged": self.converged,
            "outcome": self.outcome,
            "attainment_rises": attainment_rises(self.probes),
            "probes": [{"load": p.load, "met": p.met, "decided": p.decided, **p.record} for p in self.probes],
        }


def attainment_rises(probes: list[Probe]) -> list[list[float]]:
    """Pairs [a, b] of probed loads, a < b, where attainment rose beyond both 95 % intervals
    (the higher load's whole interval lies above the lower load's), or a was decided missed and
    b decided met (docs/method.md#capacity-convergence). More load never helps a server meet its
    SLO, so any such pair says the probes measured something else (a machine that slowed down
    between them, a warm-up that did not warm)."""
    # A probe whose client was the limit did not measure the server at its load: it is left out.
    offered = sorted((p for p in probes if not p.client_limited), key=lambda p: p.load)
    rises = {
        (low.load, high.load)
        for i, low in enumerate(offered)
        for high in offered[i + 1 :]
        if high.load > low.load
        and (
            (low.decided and not low.met and high.decided and high.met)
            or (
                "attainment_ci95" in low.record
                and "attainment_ci95" in high.record
                and high.record["attainment_ci95"][0] > low.record["attainment_ci95"][1]
            )
        )
    }
    return [list(pair) for pair in sorted(rises)]


def narrow_enough(low: float, high: float, integer: bool, tolerance: float) -> bool:
    """The bracket is within `tolerance` of its lower end (a concurrency: and one at least)."""
    return high - low <= max(1, tolerance * low) if integer else high - low <= tolerance * low


def next_up(load: float, integer: bool, ceiling: float, kv_limit: int | None) -> float:
    """Doubling, but landing on the predicted KV-limited concurrency and then one above it,
    so the break the KV cache predicts is probed exactly rather than jumped over."""
    up = load * 2
    if kv_limit is not None:
        if load < kv_limit:
            up = min(up, kv_limit)
        elif load == kv_limit:
            up = kv_limit + 1
    return min(up, ceiling)


def search_steps(
    *,
    start: float,
    floor: float,
    ceiling: float,
    integer: bool,
    tolerance: float = 0.0,
    max_probes: int = 10,
    kv_limit: int | None = None,
    out_of_time: Callable[[], bool] = lambda: False,
) -> Generator[float, Probe, SearchResult]:
    """Bracket then bisect, one probe at a time: yields each load to probe, is sent its Probe
    (or None: the load was not measured, the time having run out; `search` decides), and
    returns the SearchResult. Stops at `max_probes` probes or a load not measured, unconverged
    where the bracket is still wider than the resolution; `out_of_time()` names the outcome."""
    probes: list[Probe] = []
    passing = failing = None
    timed_out = False

    def measure(load: float):
        nonlocal timed_out
        measured = yield load
        if measured is None:
            timed_out = True
        else:
            probes.append(measured)
        return measured

    load = min(max(start, floor), ceiling)
    if kv_limit is not None and floor <= kv_limit < load:
        load = kv_limit  # a predicted break below the start is probed first, not stepped over
    while len(probes) < max_probes:
        measured = yield from measure(load)
        if measured is None:
            break
        if measured.met:
            passing = load
            if failing is not None or load >= ceiling:
                break
            load = next_up(load, integer, ceiling, kv_limit)
        else:
            failing = load
            if passing is not None or load <= floor:
                break
            load = max(floor, load // 2 if integer else load / 2)
    while (
        passing is not None
        and failing is not None
        and not narrow_enough(passing, failing, integer, tolerance)
        and len(probes) < max_probes
        and not timed_out
    ):
        middle = (passing + failing) // 2 if integer else math.sqrt(passing * failing)
        measured = yield from measure(middle)
        if measured is None:
            break
        if measured.met:
            passing = middle
        else:
            failing = middle
    if passing is None:
        outcome = "none_met" if failing == floor else "unfinished"
    elif failing is None:
        outcome = "ceiling_met" if passing >= ceiling else "unfinished"
    else:
        outcome = "bracketed" if narrow_enough(passing, failing, integer, tolerance) else "unfinished"
    # The last probe of each end decides it: an undecided one leaves the bracket (or the floor's
    # miss, the ceiling's met) unproven.
    ends = [p for p in probes if p.load in (passing, failing)]
    if outcome in ("bracketed", "none_met", "ceiling_met") and not all(p.decided for p in ends):
        outcome = "undecided"
    # A failing end where the client was the limit (at the floor too) did not measure the server.
    if failing is not None and any(p.client_limited for p in probes if p.load == failing):
        outcome = "client_limited"
    # Stopped by the time (or an end left undecided when it ran out): more time is the fix.
    if (outcome == "unfinished" and timed_out) or (outcome == "undecided" and out_of_time()):
        outcome = "out_of_time"
    return SearchResult(passing, failing, probes, outcome)


def search(probe: Callable[[float], Probe], **settings) -> SearchResult:
    """One search (search_steps' settings), `probe(load)` measuring each load; once
    `settings["out_of_time"]()`, the next load is not measured (the first always is)."""
    out_of_time = settings.get("out_of_time", lambda: False)
    steps = search_steps(**settings)
    measured = probe(next(steps))
    while True:
        try:
            load = steps.send(measured)
        except StopIteration as finished:
            return finished.value
        # Outside the try: a probe's own StopIteration is an error.
        measured = None if out_of_time() else probe(load)


RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
USAGE, PREEMPTIONS = "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"
QUEUED = ("kv_memory", "max_num_seqs", "scheduler")  # the states in which requests waited
BOUND_SHARE = 0.1  # share of a probe's busy scrapes a waiting state needs to be named the limit


def scrape_state(sample: dict, preempted: bool, *, kv_full_usage: float, max_num_seqs: int | None) -> str | None:
    """What bound the server at one scrape, from that scrape's own values (None: idle):

    kv_memory     requests were preempted since the last scrape, or waited while the KV cache
                  had no room for the largest request (usage at least `kv_full_usage`)
    max_num_seqs  requests waited with the engine's cap on running requests reached
    scheduler     requests waited with neither (the step's token budget)
    compute       requests ran and none waited
    """
    running, waiting, usage = sample[RUNNING], sample.get(WAITING, 0.0), sample.get(USAGE, 0.0)
    if preempted or (waiting and usage >= kv_full_usage):
        return "kv_memory"
    if waiting and max_num_seqs is not None and running >= max_num_seqs:
        return "max_num_seqs"
    if waiting:
        return "scheduler"
    return "compute" if running else None


def scrape_states(series: list[dict], *, kv_full_usage: float, max_num_seqs: int | None) -> list[str]:
    """Each busy scrape of one pass classified from its own running, waiting, KV usage and
    preemptions (the counter's rise since the scrape before): values that co-occurred."""
    states, previous = [], None
    for sample in series:
        if RUNNING not in sample:
            continue
        preempted = previous is not None and sample.get(PREEMPTIONS, 0.0) > previous.get(PREEMPTIONS, 0.0)
        previous = sample
        state = scrape_state(sample, preempted, kv_full_usage=kv_full_usage, max_num_seqs=max_num_seqs)
        if state is not None:
            states.append(state)
    return states


def binding_limit(record: dict, *, kv_full_usage: float, max_num_seqs: int | None) -> dict:
    """What limited the server at a probe: every busy scrape of its passes classified by
    `scrape_state`; the waiting state seen in the most scrapes, where waiting states make at
    least BOUND_SHARE of them (a burst's first scrape alone does not name a limit), else
    compute; unknown where the server publishes no /metrics."""
    if record.get("peak_num_requests_running") is None:
        return {"limit": "unknown", "evidence": "the server publishes no /metrics"}
    states = [
        state
        for one in record.get("pass_records", [])
        for state in scrape_states(
            one.get("metrics_series", []), kv_full_usage=kv_full_usage, max_num_seqs=max_num_seqs
        )
    ]
    counts = {state: states.count(state) for state in (*QUEUED, "compute")}
    if not states:
        return {"limit": "unknown", "evidence": "no scrape caught the server with requests running", "scrapes": counts}
    waited = sum(counts[state] for state in QUEUED)
    limit = max(QUEUED, key=counts.get) if waited >= BOUND_SHARE * len(states) else "compute"
    shown = ", ".join(f"{state.replace('_', ' ')} {n}" for state, n in counts.items() if n)
    why = {
        "kv_memory": "requests were preempted for KV blocks or waited with the cache full",
        "max_num_seqs": "requests waited at the engine's max_num_seqs",
        "scheduler": "requests waited with KV memory free",
        "compute": "requests ran and (almost) none waited: latency rose with KV memory free",
    }[limit]
    return {"limit": limit, "evidence": f"{why} (of {len(states)} busy scrapes: {shown})", "scrapes": counts}
