"""One way to run a stage: what every rule script does before and after its own work. The
runner sends everything the stage prints to the rule's log (one line on the terminal when it
fails), turns SIGTERM into an interrupt that unwinds (so servers are stopped and partial outputs
removed), starts the stage's clock, reads the model's facts, and writes each artifact
atomically with its provenance after validating it against its schema.

A script is `def main(stage): ...` and `run_stage(main, snakemake)`; outside Snakemake, build
a StageRun from plain objects (see `StageRun.of`).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from infbench.core import provenance
from infbench.core.artifacts import read_json, write_json
from infbench.core.rule_logging import rule_logging


def raise_on_sigterm(received: list[int]) -> None:
    """SIGTERM (Snakemake stopping a job) unwinds like Ctrl-C, so `finally` blocks run; each
    signal is also kept in `received`: an interrupt raised while Python runs a finalizer
    (`__del__`) is printed and dropped, and the stage then fails another way (in CI, its
    server, stopped by the same signal, stopped answering)."""

    def handler(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


class Files(list):
    """Named files, reachable by position, by attribute and by name, as Snakemake's are."""

    def __init__(self, named: dict):
        super().__init__(named.values())
        self._named = dict(named)

    def __getattr__(self, name: str):
        try:
            return self.__dict__["_named"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key):
        return self._named[key] if isinstance(key, str) else super().__getitem__(key)

    def keys(self):
        return self._named.keys()

    def get(self, key: str, default=None):
        return self._named.get(key, default)


@dataclass
class StageRun:
    """A rule's inputs, outputs, logs and params (Snakemake's objects or look-alikes), the
    time it started, and what every stage reads of the model."""

    input: Any
    output: Any
    log: Any
    params: Any
    started: str = field(default_factory=provenance.now_iso)

    @classmethod
    def of(cls, input: dict, output: dict, log: dict, params: dict) -> StageRun:
        """A run from plain mappings (tests, or a script run outside Snakemake): files by name
        and by position, as Snakemake's are; params by name."""
        return cls(Files(input), Files(output), Files(log), SimpleNamespace(**params))

    @cached_property
    def servers_log_dir(self) -> Path:
        """Where a stage that starts several servers keeps their logs: beside its own log
        (logs/{stage}/{model}.servers/). Not a declared log: Snakemake reads a failed job's
        logs as files, and a folder among them hides the job's own error."""
        return Path(str(self.log.rule).removesuffix(".log") + ".servers")

    @cached_property
    def model_dir(self) -> Path:
        return Path(self.input.model)

    @cached_property
    def facts(self) -> dict:
        """The model's facts (model.json beside its weights)."""
        return read_json(self.model_dir / "model.json")

    def provenance(self, inputs: dict | None = None) -> dict:
        """Where this stage's numbers came from: its config, versions, machine, code, times."""
        params = self.params
        return provenance.collect(
            params.provenance_config,
            getattr(params, "threads", None),
            self.started,
            getattr(params, "device", "cpu"),
            inputs=inputs,
        )

    def write(self, path: str | Path, record: dict, schema: str, inputs: dict | None = None) -> None:
        """The artifact with its provenance, validated against its schema, written atomically."""
        write_json(path, {**record, "provenance": self.provenance(inputs)}, schema_name=schema)


def run_stage(main: Callable[[StageRun], None], snakemake) -> None:
    """Run `main` as the rule's body, logging to the rule's first log (its own, where a rule
    also keeps its servers' logs)."""
    signalled: list[int] = []
    with rule_logging(snakemake.log[0], signalled):
        raise_on_sigterm(signalled)
        main(StageRun(snakemake.input, snakemake.output, snakemake.log, snakemake.params))
