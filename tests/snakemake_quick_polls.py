"""Snakemake's command line with the SLURM executor's status checks at most POLL_S apart. The
plugin adds 10 s to its wait after every check that finds no job finished (up to 180 s), so on
the tests' one-node cluster, running jobs of a minute one after another, each job's end was
seen up to tens of seconds late. Only how often the tests' Snakemake asks SLURM changes: the
jobs, their states and Snakemake's handling of them do not."""

import sys

from snakemake.cli import main
from snakemake_executor_plugin_slurm import Executor

POLL_S = 2
checks = Executor.next_seconds_between_status_checks
Executor.next_seconds_between_status_checks = property(
    checks.fget, lambda executor, seconds: checks.fset(executor, min(seconds, POLL_S))
)

if __name__ == "__main__":
    sys.exit(main())
