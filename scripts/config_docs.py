"""Write config/README.md from the config schema; with --check, exit 1 if it is stale.

Usage: python scripts/config_docs.py [--check] (or `make config-docs`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infbench.core.config import load_schema
from infbench.core.config_docs import README_PATH, SCHEMA_PATH, render

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {README_PATH} differs from the schema's")
    parser.add_argument("--schema", type=Path, default=REPO / SCHEMA_PATH, help="the schema (default: %(default)s)")
    args = parser.parse_args(argv)
    text = render(load_schema(args.schema))
    readme = REPO / README_PATH
    if args.check:
        if not readme.is_file() or readme.read_text() != text:
            print(f"{README_PATH} is stale: run `make config-docs`", file=sys.stderr)
            return 1
        return 0
    readme.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
