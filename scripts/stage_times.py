"""Write docs/stage-times.md from Snakemake's run-time records: one row per measured rule and
model, the median seconds of its record, and a header naming the machine and this command.

  python scripts/stage_times.py [--benchmarks benchmarks] [--output docs/stage-times.md]
                                [--machine TEXT] [--note TEXT]

Exits 2 when there are no records to read (run the pipeline first: `make report`).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from infbench.core.errors import UserError
from infbench.core.stage_times import write_stage_times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--benchmarks", default="benchmarks", help="the run's benchmarks/ folder (default: %(default)s)"
    )
    parser.add_argument("--output", default="docs/stage-times.md", help="the page to write (default: %(default)s)")
    parser.add_argument("--machine", help="describe the machine yourself (default: this one's CPU and cores)")
    parser.add_argument("--note", help="a line to add to the header, e.g. which configuration ran")
    args = parser.parse_args(argv)
    command = shlex.join(["python", "scripts/stage_times.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        times = write_stage_times(args.benchmarks, args.output, command=command, machine=args.machine, note=args.note)
    except UserError as error:
        print(f"stage_times: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}: {len(times)} records from {args.benchmarks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
