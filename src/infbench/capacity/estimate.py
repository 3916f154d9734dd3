"""A capacity with error bars, from every probe of a search rather than the last passing one:
attainment against load fitted non-increasing, the capacity where the fit falls to the target,
its 95 % interval by a parametric bootstrap widened to the probed loads the fit crosses
between and held to the probes' own decisions, and whether interleaved searches agree. See
docs/method.md#capacity-estimate.
"""

from __future__ import annotations

import math

import numpy as np

from infbench.core.capacity_terms import ABOVE, BELOW, as_number

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


def repeatability(estimates: list[dict]) -> dict:
    """Do interleaved searches (one server, one run) agree? Their capacities' 95 % intervals must share a point
    (for intervals on a line, every pair overlapping is the same): pass, else fail; not
    available where a capacity lies outside its probed range. The spread is the largest
    capacity less the smallest."""
    values = [estimate["value"] for estimate in estimates]
    intervals = [[as_number(end) for end in estimate["ci95"]] for estimate in estimates if estimate["ci95"]]
    record = {"values": values, "ci95": [estimate["ci95"] for estimate in estimates]}
    if any(not isinstance(value, (int, float)) for value in values) or len(intervals) < len(values):
        return {**record, "status": "not_available", "spread": None, "detail": "a capacity lies outside its probes"}
    common = [max(low for low, _ in intervals), min(high for _, high in intervals)]
    agree = common[0] <= common[1]
    shown_intervals = ", ".join(
        f"{value:g} [{shown(low)}, {shown(high)}]" for value, (low, high) in zip(values, record["ci95"])
    )
    return {
        **record,
        "status": "pass" if agree else "fail",
        "spread": max(values) - min(values),
        "detail": f"{len(values)} interleaved searches: {shown_intervals}; "
        + ("their intervals share a point" if agree else "their intervals do not all overlap: the searches disagree"),
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
    "client fell behind, left out. The interval covers the sampling of this run's requests, taken as independent: "
    "not a rerun's spread (a fresh server, another hour), which docs/method.md#capacity-reruns measures"
)
