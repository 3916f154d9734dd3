"""What a run's measurements will cost before it runs (`make plan`): the serving stage's
windowed passes and the capacity search's from the config, each pass's expected seconds where
an earlier run's load.json gives the level's latency and throughput on this machine, and the
time every measured stage took in that run (its `benchmarks/` records).

A windowed pass (serving/window.py) lasts about

    ramp + window + hold (+ drain) = e2e + max(window_s, window_requests / request throughput) + e2e (+ e2e)

the ramp ending after about one latency (as many completions as requests in flight), the hold
after the last counted request's latency, and a serving level's drain (its in-flight requests
finishing uncounted) after about one more; a capacity probe does not drain. A level of a run
never measured here has no latency to go by: only its floor, window_s, is known. A capacity
search stops at its time budget, capacity.max_search_s, whatever its passes would take.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infbench.core.artifacts import read_json
from infbench.core.stage_times import StageTimesError, collect
from infbench.serving.sweep import configured_levels


@dataclass
class PassPlan:
    stage: str
    what: str
    passes: int
    floor_s: float  # a pass's window alone
    expected_s: float | None  # a pass, from an earlier run's latencies; None: never measured here
    up_to: bool = False  # `passes` is the most there can be (a search stops when decided)
    budget_s: float | None = None  # the search's time budget (capacity.max_search_s): its passes stop there


def pass_seconds(
    window_s: float, window_requests: int, request_throughput: float, e2el_s: float, drain: bool = False
) -> float:
    """Ramp + window + hold (+ drain) of one windowed pass (the formula above)."""
    return e2el_s + max(window_s, window_requests / request_throughput) + e2el_s + (e2el_s if drain else 0.0)


def level_key(level: dict) -> tuple:
    return (level["api"], level["mode"], level["max_concurrency"], level["request_rate"])


def per_pass(level: dict) -> float:
    """An earlier run's level: the seconds of its passes, on average."""
    return level["duration"] / len(level["repeats"])


def serving_plan(config: dict, earlier: dict | None) -> list[PassPlan]:
    """The serve stage's levels, `load.repeats` passes each; a ramp replays its schedule (its
    floor is its last send, expected only from an earlier run). A trace's levels follow from
    the trace's own span: planned only from an earlier run's."""
    load = config["load"]
    measured = {level_key(level): level for level in (earlier or {}).get("levels", [])}
    traced = config["workload"]["source"] == "trace"
    plans = [
        PassPlan("serve", f"trace x{level['trace_scale']:g}", load["repeats"], 0.0, per_pass(level))
        for level in (earlier or {}).get("levels", [])
        if level["mode"] == "trace" and traced
    ]
    if traced and not plans:
        plans.append(PassPlan("serve", f"trace levels x{load['trace_scales']}", load["repeats"], 0.0, None))
    for level in configured_levels(load, config["workload"]["api"]):
        key = (level.api, level.mode, level.concurrency, level.arrivals.rate if level.arrivals else "inf")
        before = measured.get(key)
        if level.windowed:
            floor = load["window_s"]
            expected = (
                pass_seconds(
                    load["window_s"],
                    load["window_requests"],
                    before["request_throughput"],
                    before["median_e2el_ms"] / 1000,
                    drain=True,
                )
                if before and before["request_throughput"]
                else None
            )
        else:
            requests = {
                "ramp": (load["ramp"] or {}).get("requests"),
                "session_ramp": (load["session_ramp"] or {}).get("sessions"),
            }.get(level.mode) or 0
            floor = requests / max(level.arrivals.rate, level.arrivals.ramp_to or 0.0) if requests else 0.0
            expected = per_pass(before) if before else None
        plans.append(PassPlan("serve", level.label, load["repeats"], floor, expected))
    return plans


def capacity_plan(config: dict, earlier: dict | None) -> list[PassPlan]:
    """The capacity search: at most max_probes probes a search of at most `repeats` windowed
    passes; expected from an earlier search's probes and their pass times."""
    capacity = config["capacity"]
    if not capacity["enabled"]:
        return []
    probes = capacity["max_probes"] * capacity["runs"]
    expected = None
    if earlier:
        # The earlier run's probes (its headline run's), each pass resized to this config's
        # window, for as many runs as this config makes.
        seconds = [
            pass_seconds(
                capacity["window_s"],
                capacity["window_requests"],
                probe["request_throughput"]["mean"],
                (probe["median_e2el_ms"] or 0.0) / 1000,
            )
            * probe["passes"]
            for probe in earlier["concurrency"]["probes"]
            if probe["request_throughput"]["mean"]
        ]
        expected = sum(seconds) * capacity["runs"] / (probes * capacity["repeats"])  # a pass
    plans = [
        PassPlan(
            "capacity",
            f"concurrency search: up to {probes} probes of up to {capacity['repeats']} windows"
            + (f" over {capacity['runs']} runs" if capacity["runs"] > 1 else ""),
            probes * capacity["repeats"],
            capacity["window_s"],
            expected,
            up_to=True,
            budget_s=capacity["max_search_s"] * capacity["runs"],
        )
    ]
    if config["sessions"]["capacity"]:
        plans.append(
            PassPlan(
                "capacity",
                f"users search: up to {probes} probes of up to {capacity['repeats']} windows",
                probes * capacity["repeats"],
                capacity["window_s"],
                None,  # a turn's time depends on its conversation: known once measured
                up_to=True,
                budget_s=capacity["max_search_s"] * capacity["runs"],
            )
        )
    if config["sessions"]["capacity"] and config["sessions"]["rate"]:
        plans.append(
            PassPlan(
                "capacity",
                f"session rate search: up to {probes} probes of up to {capacity['repeats']} windows",
                probes * capacity["repeats"],
                capacity["window_s"],
                None,  # each pass's ramp lasts sessions' durations: known once the users search has run
                up_to=True,
                budget_s=capacity["max_search_s"] * capacity["runs"],
            )
        )
    if capacity["rate"]:
        # Windows of ten median latencies at the concurrency capacity: known once it is found.
        plans.append(
            PassPlan(
                "capacity",
                "rate search: windows of ten latencies",
                0,
                0.0,
                None,
                up_to=True,
                budget_s=capacity["max_search_s"] * capacity["runs"],
            )
        )
    return plans


def stage_seconds(benchmarks: Path) -> dict[tuple[str, str | None], float]:
    """Each measured stage's seconds in the run whose records are in `benchmarks` ({} if none)."""
    try:
        return {(t.model, t.rule): t.seconds for t in collect(benchmarks)}
    except StageTimesError:
        return {}


def render(config: dict, results: Path, benchmarks: Path) -> str:
    """The plan as text: per model, the windowed passes and the earlier run's stage times."""
    lines = []
    for model in config["models"]:
        name = model["name"]
        load_json, capacity_json = results / name / "load.json", results / name / "capacity.json"
        earlier_load = read_json(load_json) if load_json.exists() else None
        earlier_capacity = read_json(capacity_json) if capacity_json.exists() else None
        lines.append(f"{name}:")
        total_floor = total_expected = 0.0
        unknown = False
        for plan in serving_plan(config, earlier_load) + capacity_plan(config, earlier_capacity):
            floor = plan.passes * plan.floor_s
            expected = plan.passes * plan.expected_s if plan.expected_s is not None else None
            budget = f", stopped at {plan.budget_s:g} s (capacity.max_search_s)" if plan.budget_s else ""
            if expected is not None and plan.budget_s:
                expected = min(expected, plan.budget_s)
            bound = "up to" if plan.up_to else "at least"
            shown = f"about {expected:.0f} s" if expected is not None else "not measured here yet"
            count = f"up to {plan.passes}" if plan.up_to else f"{plan.passes}"
            if not plan.passes:
                lines.append(f"  {plan.stage:<13} {plan.what}: sized once the concurrency capacity is found{budget}")
                continue
            lines.append(
                f"  {plan.stage:<13} {plan.what}: {count} passes, windows {bound} {floor:.0f} s{budget}, {shown}"
            )
            total_floor += 0.0 if plan.up_to else floor
            total_expected += expected or 0.0
            unknown |= expected is None
        expected_text = (
            "not measured here yet"
            if not total_expected
            else f"about {total_expected:.0f} s" + (", and the levels not measured here yet" if unknown else "")
        )
        lines.append(
            f"  serving windows at least {total_floor:.0f} s; passes expected {expected_text} "
            "(server starts, warm-ups and the offline stages besides)"
        )
        times = {rule: seconds for (owner, rule), seconds in stage_seconds(benchmarks).items() if owner == name}
        if times:
            shown = ", ".join(f"{rule} {seconds:.0f} s" for rule, seconds in times.items())
            lines.append(f"  the last run's stage times ({benchmarks}): {shown}; {sum(times.values()):.0f} s in all")
    return "\n".join(lines)
