"""How long each stage took, read from Snakemake's run-time records and written as a Markdown
page (docs/stage-times.md), so that the figures a reader sees are generated, never typed in.

A record is what a rule's `benchmark:` directive writes: `benchmarks/{model}/{rule}.tsv` (or
`benchmarks/{rule}.tsv` for a rule without a model), a tab-separated table whose header starts
with `s` (wall-clock seconds) followed by `h:m:s`, `max_rss` (MiB), `max_vms`, ... and one row
per repeat (`repeat("...", n)`). A rule run once per offline round writes
`{rule}_round{N}.tsv`: its rule is `{rule}_round`, and N is kept as the round.
"""

from __future__ import annotations

import csv
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from infbench import stages
from infbench.core.errors import UserError

ROUND = re.compile(r"^(?P<rule>.+_round)(?P<round>\d+)$")
MISSING = ("", "-", "NA", "nan")


class StageTimesError(UserError):
    """A run-time record that cannot be read."""


@dataclass(frozen=True)
class StageTime:
    """One record: its rule, model (None for a rule without one), round (for offline rounds),
    the median of its rows' seconds and peak memory, and how many rows it had."""

    rule: str
    model: str | None
    round: int | None
    seconds: float
    rows: int
    max_rss_mib: float | None
    mtime: float
    path: Path

    @property
    def label(self) -> str:
        return self.rule if self.round is None else f"{self.rule} (round {self.round})"


def rule_and_model(path: Path, root: Path) -> tuple[str, str | None, int | None]:
    """Rule, model and round of the record at `path` under the benchmarks folder `root`."""
    relative = path.relative_to(root)
    if len(relative.parts) == 1:
        model = None
    elif len(relative.parts) == 2:
        model = relative.parts[0]
    else:
        raise StageTimesError(f"{path}: expected benchmarks/{{model}}/{{rule}}.tsv or benchmarks/{{rule}}.tsv")
    match = ROUND.match(relative.stem)
    if match:
        return match["rule"], model, int(match["round"])
    return relative.stem, model, None


def _number(value: str | None) -> float | None:
    if value is None or value.strip() in MISSING:
        return None
    return float(value)


def read_record(path: Path, root: Path) -> StageTime:
    """One record file: the median over its rows of `s` (and of `max_rss` where given)."""
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        if not reader.fieldnames or reader.fieldnames[0] != "s":
            raise StageTimesError(f"{path}: not a Snakemake benchmark record (its header must start with `s`)")
        try:
            rows = [(_number(row["s"]), _number(row.get("max_rss"))) for row in reader]
        except ValueError as error:
            raise StageTimesError(f"{path}: {error}") from None
    seconds = [s for s, _ in rows if s is not None]
    if not seconds:
        raise StageTimesError(f"{path}: no row with a number of seconds")
    rss = [r for _, r in rows if r is not None]
    rule, model, round_ = rule_and_model(path, root)
    return StageTime(
        rule=rule,
        model=model,
        round=round_,
        seconds=statistics.median(seconds),
        rows=len(seconds),
        max_rss_mib=statistics.median(rss) if rss else None,
        mtime=path.stat().st_mtime,
        path=path,
    )


def _pipeline_position(rule: str) -> int:
    names = [stage.name for stage in stages.STAGES]
    base = rule.removesuffix("_round")
    return names.index(base) if base in names else len(names)


def collect(benchmarks: Path | str) -> list[StageTime]:
    """Every record under `benchmarks` (one level of model folders), in pipeline order per model."""
    root = Path(benchmarks)
    if not root.is_dir():
        raise StageTimesError(f"{root}: no such folder (a pipeline run writes its run-time records there)")
    paths = sorted([*root.glob("*.tsv"), *root.glob("*/*.tsv")])
    times = [read_record(path, root) for path in paths]
    return sorted(times, key=lambda t: (t.model or "", _pipeline_position(t.rule), t.rule, t.round or 0))


def machine_line(cpu: dict | None = None) -> str:
    """The machine the command runs on: CPU model and logical cores."""
    if cpu is None:
        from infbench.core.hardware import cpu_info

        cpu = cpu_info()
    return f"{cpu['model']}, {cpu['logical_cores']} logical cores"


def _date(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%d")


def _seconds(value: float) -> str:
    minutes, seconds = divmod(round(value), 60)
    return f"{value:.1f}" + (f" ({minutes} min {seconds:02d} s)" if minutes else "")


def render(
    times: Iterable[StageTime],
    *,
    machine: str,
    command: str,
    source: str,
    note: str | None = None,
) -> str:
    """The Markdown page: a header naming the machine, the dates and the command, then the table."""
    times = list(times)
    lines = [
        "# Stage times",
        "",
        "<!-- Generated by scripts/stage_times.py (`make stage-times`): do not edit by hand. -->",
        "",
        "How long each measured rule took: Snakemake's run-time records (`benchmark:` files) of one",
        "run. The seconds are wall-clock time of the whole job (engine start-up, warm-up and every",
        "repeat included); where a record has several rows (a rule benchmarked with repeats) the",
        "median is shown.",
        "",
        f"- Generated by: `{command}`",
        f"- Records: `{source}`",
        f"- Machine: {machine} (the machine the command ran on; records copied from another machine need `--machine`)",
    ]
    if times:
        first, last = _date(min(t.mtime for t in times)), _date(max(t.mtime for t in times))
        lines.append(
            f"- Measured: {first if first == last else f'{first} to {last}'} (the records' modification times)"
        )
    if note:
        lines.append(f"- Note: {note}")
    lines.append("")
    if not times:
        lines += ["No run-time records found: run the pipeline (`make report`), then `make stage-times`.", ""]
        return "\n".join(lines)
    lines += [
        "| rule | model | seconds | rows | max RSS (MiB) |",
        "|---|---|---:|---:|---:|",
    ]
    for t in times:
        rss = f"{t.max_rss_mib:.0f}" if t.max_rss_mib is not None else "–"
        lines.append(f"| `{t.label}` | {t.model or '–'} | {_seconds(t.seconds)} | {t.rows} | {rss} |")
    total = sum(t.seconds for t in times)
    lines += [
        "",
        f"Sum of the rules above: {_seconds(total)}. Rules without a `benchmark:` directive are not",
        "timed and not included; a whole run also spends time in them and in Snakemake itself.",
        "",
    ]
    return "\n".join(lines)


def write_stage_times(
    benchmarks: Path | str,
    output: Path | str,
    *,
    command: str,
    machine: str | None = None,
    note: str | None = None,
) -> list[StageTime]:
    """Read every record under `benchmarks` and write the page to `output`; returns the records."""
    times = collect(benchmarks)
    text = render(times, machine=machine or machine_line(), command=command, source=str(benchmarks), note=note)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    return times
