"""Benchmark: does a capacity reproduce? The capacity stage rerun `--runs` times on this
machine, each with its own server start, alternating "alone" (`--forcerun capacity`) and
"after serve" (`--forcerun serve capacity`, the capacity stage right after the serve stage in
one Snakemake run), then printed per run: the capacity (the bracket's met end), the fitted
capacity and its 95 % interval; and over ordered pairs of runs (i, j), i != j, how often run
j's capacity lies inside run i's interval (coverage: what an interval that covers a rerun must
reach, docs/method.md#capacity-estimate), with the intervals' widths. Each run's
capacity.json is kept under --out. Last, the run comparison's capacity gate
(runs/comparison.py: capacity_verdict on search_bounds) over the same ordered pairs: as every
run measured the same configuration, each "lower" or "no interval" is a false alarm.
Then capacity.runs as these runs would give it: for every `--group` of runs, the 95 %
prediction interval for a rerun (capacity/estimate.rerun_interval) over their fitted
capacities, and how often each run outside the group lies inside it; and the run comparison
over capacity.runs (runs/comparison.runs_verdict) between every two disjoint groups, each
"lower" a false alarm.

    python scripts/bench_capacity_reruns.py --runs 6 --out bench/capacity-reruns \\
        -- --configfile config/config.yaml

Arguments after `--` go to every snakemake call. Run the default pipeline once first: the
runs reuse its model, workload and pool.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CONDITIONS = ("alone", "after serve")


def run_once(model: str, condition: str, extra: list[str], out: Path, index: int) -> dict:
    """One snakemake call: the capacity stage alone or right after `serve`; its capacity.json."""
    capacity = f"results/{model}/capacity.json"
    targets = [capacity] if condition == "alone" else [f"results/{model}/load.json", capacity]
    rules = ["capacity"] if condition == "alone" else ["serve", "capacity"]
    started = time.time()
    # --forcerun last: it takes every argument after it.
    subprocess.run(["snakemake", *targets, "--cores", "2", *extra, "--forcerun", *rules], check=True)
    kept = out / f"run{index:02d}-{condition.replace(' ', '-')}.json"
    shutil.copy(capacity, kept)
    record = json.loads(Path(capacity).read_text())
    return {"index": index, "condition": condition, "started": started, "file": str(kept), **summary(record)}


def summary(record: dict) -> dict:
    """The concurrency search's capacity, fitted value and interval as the run comparison reads
    it (search_bounds: an end off the probed range, or a bracket's undecided end, as the bound
    it gives; None where no capacity was measured)."""
    from infbench.runs.comparison import search_bounds

    search = record["concurrency"]
    value = search["estimate"]["value"]
    bounds = search_bounds("concurrency", search)
    return {
        "capacity": search["capacity"],
        "outcome": search["outcome"],
        "fitted": value if isinstance(value, (int, float)) else None,
        "ci95": list(bounds) if bounds else None,
    }


def coverage(runs: list[dict], key: str) -> tuple[int, int]:
    """Ordered pairs (i, j), i != j, both with a number, where run j's `key` lies in run i's
    interval: (inside, pairs)."""
    inside = pairs = 0
    for i in runs:
        for j in runs:
            if i is j or i["ci95"] is None or j[key] is None:
                continue
            pairs += 1
            inside += i["ci95"][0] <= j[key] <= i["ci95"][1]
    return inside, pairs


def gate_alarms(runs: list[dict]) -> tuple[int, int, int]:
    """Ordered pairs (baseline i, candidate j), i != j: (lower, no interval, pairs), the two
    verdicts on which the capacity gate fails."""
    from infbench.runs.comparison import LOWER, NO_INTERVAL, capacity_verdict, search_bounds

    bounds = [search_bounds("concurrency", json.loads(Path(r["file"]).read_text())["concurrency"]) for r in runs]
    verdicts = [capacity_verdict(bounds[i], bounds[j]) for i in range(len(runs)) for j in range(len(runs)) if i != j]
    return verdicts.count(LOWER), verdicts.count(NO_INTERVAL), len(verdicts)


def grouped(runs: list[dict], size: int) -> list[str]:
    """capacity.runs of `size`, from these runs' fitted capacities (and each run's own interval):
    the rerun interval's coverage of each run left out of a group (every group; and groups of
    consecutive runs against each later run, as a rerun comes later), and the capacity gate's
    false alarms between disjoint groups (runs/comparison.py's rule over runs). Groups with a run
    off its probed range have no interval: counted as skipped."""
    from infbench.capacity.estimate import rerun_interval
    from infbench.runs.comparison import LOWER, by_runs, runs_verdict

    fitted = [r["fitted"] for r in runs]
    groups = list(itertools.combinations(range(len(runs)), size))
    intervals = {
        group: rerun_interval([fitted[i] for i in group], [runs[i]["ci95"] for i in group], integer=True)["ci95"]
        for group in groups
    }
    lines = []
    for name, pairs in (
        ("any group", [(g, j) for g in groups for j in range(len(runs)) if j not in g]),
        (
            "consecutive runs, a later run",
            [(g, j) for g in groups if g[-1] - g[0] == size - 1 for j in range(g[-1] + 1, len(runs))],
        ),
    ):
        judged = [(intervals[g], fitted[j]) for g, j in pairs if intervals[g] is not None and fitted[j] is not None]
        inside = sum(low <= value <= high for (low, high), value in judged)
        if judged:
            lines.append(
                f"capacity.runs {size}, {name}: a rerun inside the prediction interval in {inside} of {len(judged)} "
                f"pairs ({inside / len(judged):.0%}); {len(pairs) - len(judged)} skipped (a run off its probed range)"
            )
    widths = [high / max(low, 1) for low, high in (i for i in intervals.values() if i)]
    if widths:
        lines.append(
            f"capacity.runs {size}: interval high / low, median {statistics.median(widths):.1f}x "
            f"(range {min(widths):.1f}-{max(widths):.1f}x), {len(widths)} of {len(groups)} groups with an interval"
        )
    pairs = [(a, b) for a in groups for b in groups if not set(a) & set(b)]
    values = [([fitted[i] for i in a], [fitted[i] for i in b]) for a, b in pairs]
    judged = [(a, b) for a, b in values if None not in a + b and by_runs(a, b)]
    if judged:
        lower = sum(runs_verdict(a, b)[0] == LOWER for a, b in judged)
        lines.append(
            f"capacity.runs {size}: the gate over runs 'lower' in {lower} of {len(judged)} ordered pairs of disjoint "
            f"groups ({lower / len(judged):.0%}); {len(pairs) - len(judged)} pairs not judged over runs"
        )
    return lines


def report(runs: list[dict], size: int = 3) -> str:
    lines = ["| run | condition | capacity | outcome | fitted [95 % CI] | width |", "|---:|---|---:|---|---|---:|"]
    for run in runs:
        ci = run["ci95"]
        shown = f"{run['fitted']} [{ci[0]:g}, {ci[1]:g}]" if ci else f"{run['fitted']} (no interval)"
        width = f"{ci[1] - ci[0]:g}" if ci else "-"  # inf where an end is a bound
        lines.append(
            f"| {run['index']} | {run['condition']} | {run['capacity']} | {run['outcome']} | {shown} | {width} |"
        )
    for key, what in (("capacity", "capacity (bracket)"), ("fitted", "fitted capacity")):
        inside, pairs = coverage(runs, key)
        share = f"{inside / pairs:.0%}" if pairs else "-"
        lines.append(f"\ncoverage of a rerun's {what}: {inside} of {pairs} ordered pairs ({share})")
    widths = [r["ci95"][1] - r["ci95"][0] for r in runs if r["ci95"] and all(map(math.isfinite, r["ci95"]))]
    if widths:
        lines.append(f"interval widths: median {statistics.median(widths):g}, range {min(widths):g}-{max(widths):g}")
    lower, unjudged, pairs = gate_alarms(runs)
    if pairs:
        lines.append(
            f"capacity gate on identical runs: 'lower' in {lower}, 'no interval' in {unjudged} of {pairs} ordered "
            f"pairs (false alarms {(lower + unjudged) / pairs:.0%})"
        )
    for condition in CONDITIONS:
        values = [r["capacity"] for r in runs if r["condition"] == condition]
        lines.append(f"{condition}: capacities {values}")
    if len(runs) > size:
        lines.extend(grouped(runs, size))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--out", type=Path, default=Path("bench/capacity-reruns"))
    parser.add_argument("--report", action="store_true", help="only print the table of the runs kept under --out")
    parser.add_argument("--group", type=int, default=3, help="capacity.runs to evaluate from these runs")
    args = parser.parse_args(own)
    if args.report:
        kept = json.loads((args.out / "runs.json").read_text())
        print(report([{**run, **summary(json.loads(Path(run["file"]).read_text()))} for run in kept], args.group))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for index in range(args.runs):
        condition = CONDITIONS[index % 2]
        print(f"run {index + 1}/{args.runs}: the capacity stage {condition}", flush=True)
        runs.append(run_once(args.model, condition, extra, args.out, index + 1))
        (args.out / "runs.json").write_text(json.dumps(runs, indent=1))
        print(report(runs, args.group), flush=True)


if __name__ == "__main__":
    main()
