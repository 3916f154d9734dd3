"""The regression gate's false-alarm rate and power, measured on replicate runs.

    # N replicates of the serving stage of a finished project (a fresh server each, same config)
    .venv/bin/python scripts/bench_gate.py replicate --project . --count 6 --out gate-replicates
    # every pair of them gated, as they are and with planted slowdowns
    .venv/bin/python scripts/bench_gate.py measure gate-replicates/rep-* --gate '*/serve/*' \\
        --slowdowns 0.05 0.1 0.2 0.3 --json gate.json

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
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from infbench.runs.gate_power import measure_gate
from infbench.runs.results import load_run


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
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=1))


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
    args = parser.parse_args()
    if args.command == "replicate":
        replicate(args.project.resolve(), args.count, args.out.resolve(), args.model)
    else:
        measure(args.runs, args.gate or ["*/serve/*"], args.threshold, args.slowdowns, args.json)


if __name__ == "__main__":
    main()
