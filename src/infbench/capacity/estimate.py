"""A capacity with error bars, from every probe of a search rather than the last passing one:
attainment against load fitted non-increasing, the capacity where the fit falls to the target,
its 95 % interval by a parametric bootstrap widened to the probed loads the fit crosses
between and held to the probes' own decisions; over capacity.runs runs, where the next
run's capacity is likely to fall. See
docs/method.md#capacity-estimate and #capacity-reruns.
"""

from __future__ import annotations

import math

import numpy as np

from infbench.core.capacity_terms import ABOVE, BELOW
from infbench.core.stats import t_975

BOOTSTRAP_ROUNDS = 2000


def non_increasing_fit(values: list[float], weights: list[float]) -> list[float]:
    """The weighted least-squares non-increasing sequence nearest `values` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [weighted mean, weight, count]
    for value, weight in zip(values, weights):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            mean, weight, count = blocks.pop()
            previous = blocks[-1]
            total = previous[1] + weight
            previous[0] = (previous[0] * previous[1] + mean * weight) / total if total else (previous[0] + mean) / 2
            previous[1], previous[2] = total, previous[2] + count
    return [mean for mean, _, count in blocks for _ in range(count)]


def crossing(loads: list[float], fitted: list[float], target: float, integer: bool) -> float:
    """The highest load at which the fitted curve, linear between probed loads, is at least the
    target; BELOW when even the lowest probe misses, ABOVE when the highest one meets it."""
    if fitted[0] < target:
        return BELOW
    for (low, low_share), (high, high_share) in zip(zip(loads, fitted), zip(loads[1:], fitted[1:])):
        if high_share < target:
            x = low + (low_share - target) / (low_share - high_share) * (high - low)
            return math.floor(x + 1e-9) if integer else x
    return ABOVE


def within_decided(value: float, met: float | None, missed: float | None, integer: bool) -> float:
    """A crossing held to the probes' decisions: at least `met` (the highest load decided met),
    below `missed` (the lowest decided missed; a rate: at most it); as it is where they conflict."""
    if met is not None and missed is not None and met >= missed:
        return value  # attainment rose with load: the attainment-falls check fails instead
    if met is not None:
        value = max(value, met)
    if missed is not None:
        value = min(value, missed - 1 if integer else missed)
    return value


def capacity_estimate(
    probes: list[tuple[float, int, int]],
    target: float,
    *,
    integer: bool,
    seed: int = 0,
    met: float | None = None,
    missed: float | None = None,
) -> dict:
    """`probes`: (load, met_slo, counted) per probe (a load probed twice pooled); `met` and `missed`:
    the highest load decided met and the lowest decided missed. The capacity from the fitted
    curve, its 95 % bootstrap interval (both `within_decided`), and the fitted curve itself."""
    pooled: dict[float, list[int]] = {}
    for load, met_slo, counted in probes:
        kept = pooled.setdefault(load, [0, 0])
        kept[0] += met_slo
        kept[1] += counted
    loads = sorted(load for load, (_, n) in pooled.items() if n)
    if not loads:
        return {"value": None, "ci95": None, "curve": [], "method": METHOD}
    met_slo = np.array([pooled[load][0] for load in loads])
    counted = np.array([pooled[load][1] for load in loads])
    shares = met_slo / counted
    fitted = non_increasing_fit(shares.tolist(), counted.tolist())
    value = crossing(loads, fitted, target, integer)
    rng = np.random.default_rng(seed)
    draws = rng.beta(met_slo + 0.5, counted - met_slo + 0.5, size=(BOOTSTRAP_ROUNDS, len(loads)))
    values = sorted(
        crossing(loads, non_increasing_fit(row.tolist(), counted.tolist()), target, integer) for row in draws
    )
    low, high = values[int(0.025 * BOOTSTRAP_ROUNDS)], values[math.ceil(0.975 * BOOTSTRAP_ROUNDS) - 1]
    if value not in (BELOW, ABOVE):
        gap = next(i for i in range(len(loads) - 1) if fitted[i + 1] < target)
        low = min(low, loads[gap])
        high = max(high, loads[gap + 1] - 1 if integer else loads[gap + 1])
    value, low, high = (within_decided(v, met, missed, integer) for v in (value, low, high))
    return {
        "value": shown(value),
        "ci95": [shown(low), shown(high)],
        "below_lowest_share": sum(v == BELOW for v in values) / BOOTSTRAP_ROUNDS,
        "above_highest_share": sum(v == ABOVE for v in values) / BOOTSTRAP_ROUNDS,
        "curve": [
            {"load": load, "attainment": share, "fitted": fit, "counted": int(n)}
            for load, share, fit, n in zip(loads, shares.tolist(), fitted, counted.tolist())
        ],
        "lowest_probe": loads[0],
        "highest_probe": loads[-1],
        "method": METHOD,
    }


def rerun_interval(values: list, own: list | None = None, *, integer: bool) -> dict:
    """The 95 % prediction interval for one more run's capacity, from `values`, the fitted
    capacities of capacity.runs runs, each on its own server, and `own`, each run's own 95 %
    interval (RERUN_METHOD). None as the interval where fewer than two runs, or any run's
    capacity, or an end of its own interval, off its probed range or missing."""
    record = {"values": values, "runs": len(values), "method": RERUN_METHOD}
    open_ended = any(isinstance(end, str) for interval in own or [] if interval for end in interval)
    if len(values) < 2 or open_ended or not all(isinstance(v, (int, float)) and v > 0 for v in values):
        return {**record, "geometric_mean": None, "sd_log": None, "t": None, "ci95": None}
    logs = np.log(np.asarray(values, dtype=float))
    centre, spread, t = float(logs.mean()), float(logs.std(ddof=1)), t_975(len(values) - 1)
    half = t * spread * math.sqrt(1 + 1 / len(values))
    low, high = math.exp(centre - half), math.exp(centre + half)
    # Never narrower than a run's own interval: runs that agree to the request say little of a
    # rerun's spread.
    ends = [end for interval in own or [] if interval for end in interval if math.isfinite(end)]
    low, high = min([low, *ends]), max([high, *ends])
    # A concurrency is a whole number of requests: the interval widened to the integers around it.
    ends = [math.floor(low + 1e-9), math.ceil(high - 1e-9)] if integer else [round(low, 3), round(high, 3)]
    return {
        **record,
        "geometric_mean": round(math.exp(centre), 3),
        "sd_log": round(spread, 4),
        "t": round(t, 4),
        "ci95": ends,
    }


def shown(value: float) -> float | str:
    """A crossing as JSON: the load, or "below" / "above" the probed range."""
    if value == BELOW:
        return "below"
    if value == ABOVE:
        return "above"
    return value


METHOD = (
    "attainment against load fitted non-increasing (pool adjacent violators, weighted by counted requests); "
    "capacity = the highest load where the fit, linear between probes, is at least the target; 95 % interval "
    f"from {BOOTSTRAP_ROUNDS} refits with each probe's attainment drawn from its Jeffreys posterior, widened to "
    "the probed loads the fit crosses between; value and interval held at or above the highest load decided met and "
    "below the lowest decided missed (a rate: at most it) unless those conflict; probes too few to be met, or whose "
    "client was the limit, left out. The interval covers the sampling of this run's requests, taken as independent: "
    "not a rerun's spread (a fresh server, another hour), which docs/method.md#capacity-reruns measures"
)

RERUN_METHOD = (
    "over n runs' fitted capacities x_i (capacity.runs, each run a search on a server started for it, or on "
    "the external endpoint again): exp(mean(ln x) +- t_{0.975, n-1} * sd(ln x) * sqrt(1 + 1/n)), Student's "
    "prediction interval for one more run on the log scale (not an interval for the mean, which holds a rerun "
    "less often: 84 % at n = 3), widened to hold each run's own 95 % interval (none where one is open-ended), a "
    "concurrency to whole requests; every run sends the same seeded requests; it covers what the runs varied by "
    "(server starts, the machine's drift over the minutes between them), not a change of machine or an hour the "
    "runs did not see; measured coverage: docs/method.md#capacity-reruns"
)
