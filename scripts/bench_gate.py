"""The regression gate's false-alarm rate and power, measured on replicate runs.

    # N replicates of the serving stage of a finished project (a fresh server each, same config)
    .venv/bin/python scripts/bench_gate.py replicate --project . --count 6 --out gate-replicates
    # every pair of them gated, as they are and with planted slowdowns
    .venv/bin/python scripts/bench_gate.py measure gate-replicates/rep-* --gate '*/serve/*' \\
        --slowdowns 0.05 0.1 0.2 0.3 --json gate.json

    # how often the gate catches the slowdown it states, on simulated passes of known spread
    .venv/bin/python scripts/bench_gate.py simulate --passes 2 3 6 20 --spread 0.1

    # the variants stage's paired gate on reference servers: one with a planted slower token schedule
    .venv/bin/python scripts/bench_gate.py variants --slowdowns 0 0.05 0.1 0.2 --runs 20
    # the same gate on vLLM: rerun a project's variants rule (fresh servers each time) and gate
    # each run; with variants that differ only by name, every regressed figure is a false alarm
    .venv/bin/python scripts/bench_gate.py variants-rerun --project . --runs 8 --out variant-reruns

`measure` prints, for the gate given (default: every serving figure at the default threshold),
the share of replicate pairs it fails (false alarms) and the share it fails once the candidate
is made s slower (power), each with a 95 % interval over pairs (infbench.runs.gate_power).
`replicate` reruns the project's serve rule in place: its own results/{model}/load.json and
server.json are the last replicate's afterwards (the stages that read them rerun on the next
`snakemake`), so run it on a copy of the project.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from infbench.core.stats import log_ratio
from infbench.runs.comparison import GATE_ALPHA, GATE_POWER, Figure, catchable_slowdown, p_slower, reach_text
from infbench.runs.gate_power import measure_gate
from infbench.runs.results import load_run

# What both variants commands gate by default.
VARIANTS_GATE = ["*/median_tpot_ms", "*/output_throughput"]


def replicate(project: Path, count: int, out: Path, model: str | None) -> None:
    """Rerun the serve rule `count` times in `project` and keep each run's serving artifacts."""
    results = project / "results"
    model = model or next(p.name for p in sorted(results.iterdir()) if (p / "load.json").is_file())
    snakemake = Path(sys.executable).with_name("snakemake")
    for index in range(count):
        started = time.monotonic()
        subprocess.run(
            [str(snakemake), f"results/{model}/load.json", "--cores", "2", "--forcerun", "serve"],
            cwd=project,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        target = out / f"rep-{index}"
        (target / "results" / model).mkdir(parents=True, exist_ok=True)
        for name in ("load.json", "server.json"):
            shutil.copy2(results / model / name, target / "results" / model / name)
        facts = project / "resources" / "models" / model / "model.json"
        (target / "resources" / "models" / model).mkdir(parents=True, exist_ok=True)
        shutil.copy2(facts, target / "resources" / "models" / model / "model.json")
        print(f"replicate {index + 1} of {count}: {time.monotonic() - started:.0f} s -> {target}", flush=True)


def measure(runs: list[str], patterns: list[str], threshold: float, slowdowns: list[float], json_path) -> None:
    # rep-2 before rep-10: the order the replicates were made in.
    runs = sorted(runs, key=lambda run: [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", run)])
    result = measure_gate([load_run(run) for run in runs], patterns, threshold, slowdowns)
    alarms = result["false_alarms"]
    print(f"gate {' '.join(patterns)} at threshold {threshold:.0%}, {len(runs)} replicates, {alarms['pairs']} pairs")
    print(
        f"false alarms: {alarms['hits']} of {alarms['pairs']} pairs ({alarms['rate']:.0%}, "
        f"95 % interval {alarms['ci95'][0]:.0%}-{alarms['ci95'][1]:.0%})"
    )
    for power in result["power"]:
        print(
            f"slowed {power['slowdown']:.0%}: caught in {power['hits']} of {power['pairs']} pairs "
            f"({power['rate']:.0%}, {power['ci95'][0]:.0%}-{power['ci95'][1]:.0%})"
        )
    smallest = result["smallest_detected"]
    print(
        "smallest slowdown caught in 80 % of pairs: "
        + (f"{smallest:.0%}" if smallest is not None else f"none up to {max(slowdowns):.0%}")
    )
    stated = result["stated_reach"]
    if stated:
        print(
            f"stated by the gate from each pair's own spread ({GATE_POWER * 100:.0f} % power): median "
            f"{reach_text(stated['median'])}, {reach_text(stated['low'])} to {reach_text(stated['high'])} over "
            f"{stated['pairs']} pairs"
        )
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=1))


def simulate(passes: list[int], spread: float, tested: int, threshold: float, draws: int, seed: int) -> None:
    """How often the gate catches the slowdown it states, where passes are independent and
    log-normal with a known spread (sd of ln figure), judged by the gate's own p_slower at Holm's
    first level, twice: with the reach taken from the true spread (at least GATE_POWER where the
    rule is as conservative as it means to be), and with each draw's reach taken, as the gate
    takes it, from the spread of an unslowed pair of runs (what a user's stated reach delivers)."""
    rng = random.Random(seed)

    def sample(slowdown: float) -> tuple[list[float], list[float]]:
        base = [math.exp(rng.gauss(0, spread)) for _ in range(n)]
        return base, [math.exp(rng.gauss(0, spread)) / (1 + slowdown) for _ in range(n)]

    level = GATE_ALPHA / tested  # Holm's first step

    def caught(slowdown: float) -> bool:
        figures = [Figure("k", "m", "serve", "c", "x", "u", "higher", tuple(s), "s") for s in sample(slowdown)]
        return p_slower(*figures, threshold=threshold) <= level

    for n in passes:
        true_reach = catchable_slowdown(spread * math.sqrt(2 / n), n - 1, level, threshold)
        line = f"{n} passes a side, spread {spread * 100:.0f} %, {tested} gated: from the true spread stated "
        if true_reach is None:
            print(line + f"{reach_text(None)}, nothing to plant")
            continue
        at_true = sum(caught(true_reach) for _ in range(draws))
        own, at_own = [], 0
        for _ in range(draws):
            stated = catchable_slowdown(log_ratio(*sample(0.0))[1], n - 1, level, threshold)
            if stated is not None:  # "beyond x100" states nothing to catch
                own.append(stated)
                at_own += caught(stated)
        print(
            line
            + f"{true_reach * 100:.1f} %, caught in {at_true / draws * 100:.1f} % of {draws} draws; from each "
            + (
                f"pair's own spread stated a median {statistics.median(own) * 100:.1f} %, caught in "
                f"{at_own / len(own) * 100:.1f} % of the {len(own)} that stated one"
                if own
                else f"pair's own spread: {reach_text(None)} in every draw"
            )
        )


def variants(slowdowns: list[float], runs: int, rounds: int, requests: int, threshold: float, patterns) -> None:
    """The variants stage's gate (serving.variants) on two reference servers taking turns, the
    candidate's tokens `slowdown` slower: the share of `runs` runs of `rounds` rounds it fails."""
    import tempfile

    from infbench.runs.comparison import gate_record
    from infbench.runs.gate_power import rate
    from infbench.serving.reference_server import ReferenceServer, Schedule
    from infbench.serving.variants import comparisons, run_rounds

    rows = [{"id": f"r{i}", "prompt": f"p {i}", "prompt_tokens": 2, "max_tokens": 16, "api": "completions"}
            for i in range(256)]  # fmt: skip
    print(f"{runs} runs of {rounds} rounds, {requests} requests a pass at c=4, gate {patterns}, threshold {threshold}")
    for slowdown in slowdowns:
        with tempfile.TemporaryDirectory() as folder:
            servers = {
                name: ReferenceServer("m", f"{folder}/{name}.log", Schedule(ttft_ms=10, itl_ms=itl, max_num_seqs=16))
                for name, itl in (("base", 10.0), ("candidate", 10.0 * (1 + slowdown)))
            }
            for server in servers.values():
                server.start()
            failed, ratios = 0, []
            try:
                for run in range(runs):
                    found = run_rounds(servers, rows, levels=[4], requests=requests, rounds=rounds, slo_ms={},
                                       timeout_s=30, seed=run, progress=lambda line: None)  # fmt: skip
                    record = {"threshold": threshold, "comparisons": comparisons(found, "m", "base", threshold)}
                    failed += bool(gate_record(record, patterns)["regressions"])
                    ratios += [
                        f["ratio"] for f in record["comparisons"][0]["figures"] if f["metric"] == "median_tpot_ms"
                    ]
            finally:
                for server in servers.values():
                    server.stop()
        low, high = rate(failed, runs)["ci95"]
        print(
            f"slowdown {slowdown * 100:.0f} %: the gate failed {failed} of {runs} runs "
            f"({failed / runs * 100:.0f} %, 95 % interval {low * 100:.0f}-{high * 100:.0f} %); "
            f"TPOT ratio median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}"
        )


def variants_rerun(project: Path, runs: int, out: Path, patterns: list[str], model: str | None, cores: int) -> None:
    """Rerun `project`'s variants rule `runs` times (fresh servers each, snakemake --cores
    `cores`), keep each variants.json in `out`, and gate each: with variants that differ only by
    name, every figure the gate calls regressed is a false alarm; a run the gate fails for
    another reason (a figure incomplete or without an interval) is counted apart, as unjudged."""
    from infbench.core.artifacts import read_json
    from infbench.runs.comparison import gate_record
    from infbench.runs.gate_power import rate

    results = project / "results"
    model = model or next(p.name for p in sorted(results.iterdir()) if (p / "variants.json").is_file())
    snakemake = Path(sys.executable).with_name("snakemake")
    out.mkdir(parents=True, exist_ok=True)
    failed, unjudged, ratios = 0, 0, {}
    for index in range(runs):
        started = time.monotonic()
        subprocess.run(
            [str(snakemake), f"results/{model}/variants.json", "--cores", str(cores), "--forcerun", "variants"],
            cwd=project, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        record = read_json(results / model / "variants.json")
        shutil.copy2(results / model / "variants.json", out / f"run-{index}.json")
        lines = gate_record(record, patterns)["regressions"]
        regressions = [line for line in lines if line.startswith("regressed:")]
        failed += bool(regressions)
        unjudged += bool(lines) and not regressions
        figures = [f for c in record["comparisons"] for f in c["figures"]]
        for f in figures:
            ratios.setdefault(f["metric"], []).append(f["ratio"])
        shown = ", ".join(
            f"{f['metric']} {f['ratio']:.3f} [{f['ci95_low']:.3f}, {f['ci95_high']:.3f}]"
            for f in figures
            if f["metric"] in ("median_tpot_ms", "output_throughput") and f["p_slower"] is not None
        )
        verdict = (
            f"failed ({len(regressions)}: {regressions[0]})"
            if regressions
            else f"unjudged ({lines[0]})"
            if lines
            else "passed"
        )
        print(f"run {index + 1} of {runs}, {time.monotonic() - started:.0f} s: {shown}; gate {verdict}", flush=True)
    judged = runs - unjudged
    low, high = rate(failed, judged)["ci95"] if judged else (0.0, 1.0)
    print(
        f"gate {' '.join(patterns)}: false alarms in {failed} of {judged} judged runs "
        f"({failed / max(judged, 1) * 100:.0f} %, 95 % interval {low * 100:.0f}-{high * 100:.0f} %); "
        f"{unjudged} runs unjudged (a figure incomplete or without an interval)"
    )
    for metric, values in ratios.items():
        finite = [v for v in values if v is not None and math.isfinite(v)]
        if finite:
            print(f"{metric} ratio: median {statistics.median(finite):.3f}, range {min(finite):.3f}-{max(finite):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    rep = commands.add_parser("replicate", help="rerun the serving stage of a finished project")
    rep.add_argument("--project", type=Path, default=Path("."))
    rep.add_argument("--count", type=int, default=6)
    rep.add_argument("--out", type=Path, required=True)
    rep.add_argument("--model", default=None)
    mes = commands.add_parser("measure", help="the gate's false alarms and power over replicate runs")
    mes.add_argument("runs", nargs="+")
    mes.add_argument("--gate", action="append", default=None)
    mes.add_argument("--threshold", type=float, default=0.10)
    mes.add_argument("--slowdowns", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.3, 0.5])
    mes.add_argument("--json", default=None)
    sim = commands.add_parser("simulate", help="the share of planted slowdowns at the stated reach the gate catches")
    sim.add_argument("--passes", type=int, nargs="+", default=[2, 3, 6, 20])
    sim.add_argument("--spread", type=float, default=0.1)
    sim.add_argument("--gated", type=int, default=1)
    sim.add_argument("--threshold", type=float, default=0.10)
    sim.add_argument("--draws", type=int, default=4000)
    sim.add_argument("--seed", type=int, default=0)
    var = commands.add_parser("variants", help="the variants stage's paired gate on reference servers")
    var.add_argument("--slowdowns", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2])
    var.add_argument("--runs", type=int, default=20)
    var.add_argument("--rounds", type=int, default=4)
    var.add_argument("--requests", type=int, default=16)
    var.add_argument("--threshold", type=float, default=0.05)
    var.add_argument("--gate", action="append", default=None)
    rer = commands.add_parser("variants-rerun", help="rerun a project's variants rule and gate each run")
    rer.add_argument("--project", type=Path, default=Path("."))
    rer.add_argument("--runs", type=int, default=8)
    rer.add_argument("--out", type=Path, required=True)
    rer.add_argument("--model", default=None)
    rer.add_argument("--gate", action="append", default=None)
    rer.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)), help="snakemake --cores (all CPUs)")
    args = parser.parse_args()
    if args.command == "variants-rerun":
        variants_rerun(args.project.resolve(), args.runs, args.out.resolve(),
                       args.gate or VARIANTS_GATE, args.model, args.cores)  # fmt: skip
    elif args.command == "variants":
        variants(args.slowdowns, args.runs, args.rounds, args.requests, args.threshold,
                 args.gate or VARIANTS_GATE)  # fmt: skip
    elif args.command == "simulate":
        simulate(args.passes, args.spread, args.gated, args.threshold, args.draws, args.seed)
    elif args.command == "replicate":
        replicate(args.project.resolve(), args.count, args.out.resolve(), args.model)
    else:
        measure(args.runs, args.gate or ["*/serve/*"], args.threshold, args.slowdowns, args.json)


if __name__ == "__main__":
    main()
