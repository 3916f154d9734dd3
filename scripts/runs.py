"""Finished runs: pack one into an archive, unpack one, or compare two or more.

  python scripts/runs.py pack [PROJECT] -o run.tar.gz
  python scripts/runs.py unpack run.tar.gz -o FOLDER
  python scripts/runs.py compare BASELINE CANDIDATE [...] [--html comparison.html] [--json comparison.json]
                         [--threshold 0.10] [--label NAME ...] [--gate '*/serve/c=4/output_throughput' ...]
  python scripts/runs.py gate results/MODEL/variants.json --gate '*/variants/c=4/median_tpot_ms' [...]

A run is a project folder, its results/ folder, an archive made by `pack`, or the JSON file
`vllm bench serve --save-result` writes. `compare` exits 1 when a gated figure fails (missing
from the candidate, without an interval there, or slower under Holm's step-down over every
gated figure: docs/comparing-runs.md), 2 on bad input, else 0. `gate` applies the same gate to
the variants stage's paired comparisons (docs/method.md#variants), with the same exit codes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infbench.core.artifacts import read_json
from infbench.core.errors import UserError
from infbench.runs.archive import pack, unpack
from infbench.runs.command import verdict_counts, write_comparison
from infbench.runs.comparison import gate_record

TEMPLATE = Path(__file__).resolve().parents[1] / "report" / "run_comparison.html.j2"


def compare(args) -> int:
    record, regressions = write_comparison(
        args.runs,
        html=args.html,
        template=TEMPLATE,
        json_path=args.json,
        threshold=args.threshold,
        labels=args.label,
        gate_patterns=args.gate,
    )
    print("\n".join(verdict_counts(record)))
    print(f"wrote {args.html}" + (f" and {args.json}" if args.json else ""))
    for line in regressions:
        print(line, file=sys.stderr)
    reach = record["gate"]["reach"]["line"] if args.gate else None
    if regressions:
        print(f"gate: {len(regressions)} gated figure(s) failed the gate ({reach}); see {args.html}", file=sys.stderr)
        return 1
    if args.gate:
        print(f"gate: passed; not proof of no regression: {reach}")
    return 0


def gate_variants(args) -> int:
    """The run comparison's gate on a variants.json: each variant against its baseline."""
    path = Path(args.variants)
    if not path.is_file():
        raise UserError(f"no file {path}; give the variants stage's results/MODEL/variants.json")
    gated = gate_record(read_json(path), args.gate)
    for line in gated["regressions"]:
        print(line, file=sys.stderr)
    reach = gated["reach"]["line"]
    if gated["regressions"]:
        print(f"gate: {len(gated['regressions'])} gated figure(s) failed the gate ({reach})", file=sys.stderr)
        return 1
    print(f"gate: passed; not proof of no regression: {reach}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="a finished run's results, with provenance, in one .tar.gz")
    packing.add_argument("project", nargs="?", default=".", help="the project folder (default: here)")
    packing.add_argument("-o", "--output", required=True, help="the archive to write, *.tar.gz")
    unpacking = commands.add_parser("unpack", help="an archive made by pack, checked, into a new folder")
    unpacking.add_argument("archive")
    unpacking.add_argument("-o", "--output", required=True, help="a new or empty folder")
    comparing = commands.add_parser("compare", help="the first run is the baseline, the others candidates")
    comparing.add_argument("runs", nargs="+", help="project folders, results/ folders, archives, vLLM result files")
    comparing.add_argument("--html", default="comparison.html", help="the page to write (default comparison.html)")
    comparing.add_argument("--json", help="also write the comparison as JSON")
    comparing.add_argument("--threshold", type=float, default=0.10, help="smallest change called a difference")
    comparing.add_argument("--label", action="append", help="a name per run, in order (default: what differs)")
    comparing.add_argument("--gate", action="append", help="fail (exit 1) if a matching figure fails the gate")
    gating = commands.add_parser("gate", help="the gate on a variants.json: each variant against the baseline")
    gating.add_argument("variants", help="results/MODEL/variants.json")
    gating.add_argument("--gate", action="append", required=True, help="fail (exit 1) if a matching figure fails")
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            manifest = pack(args.project, args.output)
            print(f"packed {len(manifest['files'])} files of {args.project} into {args.output}")
            return 0
        if args.command == "unpack":
            manifest = unpack(args.archive, args.output)
            print(f"unpacked {len(manifest['files'])} files into {args.output} (checksums verified)")
            return 0
        if args.command == "gate":
            return gate_variants(args)
        return compare(args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
