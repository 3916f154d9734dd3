"""What the regression gate catches, measured: its false-alarm rate on replicate runs of one
configuration, and its power on the same replicates with a slowdown of known size planted in
the candidate.

Every ordered pair (baseline i, candidate j), i != j, of replicates is a false alarm when the
gate fails on it (both orders: drift over the replicates' hours then biases neither way). The
same pair with every serving figure of the candidate made `s` slower (latencies x (1 + s),
throughput and goodput / (1 + s), each pass's figure scaled alike) is a detection when the
gate fails on it: the slowdown sits on top of the replicates' own run-to-run noise, which is
what a real regression meets. (A real slowdown loses goodput in steps, as latencies cross the
SLO; scaled smoothly, goodput understates it, so the power read from goodput is low, if
anything.) Rates carry a 95 % Wilson interval over pairs; pairs that share a run are not
independent, so the interval is narrower than the truth.
"""

from __future__ import annotations

import copy
import itertools
import math
import statistics
from dataclasses import replace

from infbench.capacity.search import wilson_interval
from infbench.runs.comparison import SERVING_METRICS, comparison_record, gate, gate_reach
from infbench.runs.results import RunResults

DETECTED = 0.8  # the conventional power: the smallest slowdown caught in 4 of 5 pairs
MIN_PAIRS = 5  # fewer pairs say nothing of a rate (one pair's "100 %" is 21-100 %)


def slowed_load(load: dict, slowdown: float) -> dict:
    """The load artifact of a server `slowdown` slower in every serving figure of every pass."""
    factor = 1 + slowdown
    slowed = copy.deepcopy(load)
    for level in slowed["levels"]:
        for repeat in level["repeats"]:
            for metric, (_, better) in SERVING_METRICS.items():
                value = repeat.get(metric)
                if value is not None:
                    repeat[metric] = value * factor if better == "lower" else value / factor
    return slowed


def slowed_run(run: RunResults, slowdown: float) -> RunResults:
    models = {
        name: {**artifacts, "load": slowed_load(artifacts["load"], slowdown)} if "load" in artifacts else artifacts
        for name, artifacts in run.models.items()
    }
    return replace(run, models=models, source=f"{run.source} slowed {slowdown:.0%}")


def pair_record(baseline: RunResults, candidate: RunResults, threshold: float) -> dict:
    """One pair's comparison (fresh copies: a comparison labels its runs)."""
    return comparison_record([copy.copy(baseline), copy.copy(candidate)], threshold, ["baseline", "candidate"])


def gate_fails(baseline: RunResults, candidate: RunResults, patterns: list[str], threshold: float) -> list[str]:
    """The gate's failure lines for one pair."""
    return gate(pair_record(baseline, candidate, threshold), patterns)


def stated_reach(runs: list[RunResults], pairs, patterns: list[str], threshold: float) -> dict | None:
    """What the gate states it catches, pair by pair (comparison.gate_reach): the smallest of a
    pair's gated figures' catchable slowdowns (a slowdown of every figure is caught first by the
    most sensitive one), as its median and range over the pairs, None for "beyond x100"
    (comparison.REACH_CAP); None where no pair states one."""
    stated = []
    for i, j in pairs:
        reach = gate_reach(pair_record(runs[i], runs[j], threshold), patterns)["figures"]
        if reach:
            stated.append(min(math.inf if f["slowdown"] is None else f["slowdown"] for f in reach.values()))
    if not stated:
        return None

    def finite(value: float) -> float | None:
        return None if math.isinf(value) else value

    summary = {"median": statistics.median(stated), "low": min(stated), "high": max(stated)}
    return {**{key: finite(value) for key, value in summary.items()}, "pairs": len(stated)}


def rate(hits: int, pairs: int) -> dict:
    low, high = wilson_interval(hits, pairs)
    return {"hits": hits, "pairs": pairs, "rate": hits / pairs if pairs else None, "ci95": [low, high]}


def measure_gate(runs: list[RunResults], patterns: list[str], threshold: float, slowdowns: list[float]) -> dict:
    """False alarms over every pair of replicates, and detections at each planted slowdown."""
    if len(runs) < 2:
        raise ValueError("the gate's error rates need at least two replicate runs")
    pairs = list(itertools.permutations(range(len(runs)), 2))
    alarms = {f"{i}-{j}": gate_fails(runs[i], runs[j], patterns, threshold) for i, j in pairs}
    power = []
    for slowdown in sorted(slowdowns):
        caught = sum(bool(gate_fails(runs[i], slowed_run(runs[j], slowdown), patterns, threshold)) for i, j in pairs)
        power.append({"slowdown": slowdown, **rate(caught, len(pairs))})
    # The smallest slowdown from which every larger one tried is caught too, given enough pairs.
    smallest = None
    if len(pairs) >= MIN_PAIRS:
        for p in reversed(power):
            if p["rate"] < DETECTED:
                break
            smallest = p["slowdown"]
    return {
        "patterns": patterns,
        "threshold": threshold,
        "runs": [run.source for run in runs],
        "false_alarms": {**rate(sum(bool(lines) for lines in alarms.values()), len(pairs)), "lines": alarms},
        "power": power,
        "smallest_detected": smallest,
        "stated_reach": stated_reach(runs, pairs, patterns, threshold),
        "detected_means": f"the gate failed in at least {DETECTED:.0%} of pairs (at least {MIN_PAIRS} pairs)",
    }
