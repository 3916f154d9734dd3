"""Print what the configured run's measurements will take before running it: the serving
levels' and the capacity search's windowed passes from the config, each expected from an
earlier run's latencies here (results/), and that run's stage times (benchmarks/).

  python scripts/plan.py [--configfile FILE ...] [--results results] [--benchmarks benchmarks]

Exits 2 on a config error, naming it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from infbench.core.config import ConfigError, validate_config
from infbench.core.run_plan import render

REPO = Path(__file__).resolve().parent.parent


def merged(base: dict, overlay: dict) -> dict:
    """Snakemake's merge of --configfile overlays: mappings key by key, everything else replaced."""
    out = dict(base)
    for key, value in overlay.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", nargs="*", default=[], help="overlays on config/config.yaml, in order")
    parser.add_argument("--results", default="results", help="an earlier run's results/ (default: %(default)s)")
    parser.add_argument("--benchmarks", default="benchmarks", help="its run-time records (default: %(default)s)")
    args = parser.parse_args(argv)
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for path in args.configfile:
        config = merged(config, yaml.safe_load(Path(path).read_text()))
    try:
        validate_config(config, REPO / "workflow" / "schemas" / "config.schema.yaml", Path.cwd())
    except ConfigError as error:
        print(f"plan: {error}", file=sys.stderr)
        return 2
    print(render(config, Path(args.results), Path(args.benchmarks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
