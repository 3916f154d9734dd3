"""A comparison end to end, as `scripts/runs.py compare` and the comparison workflow run it:
read the runs, compare each candidate with the baseline, gate, and write the JSON and the page
(both before the gate's verdict is returned, so a failing CI job still keeps them)."""

from __future__ import annotations

from pathlib import Path

from infbench.core.artifacts import write_json, write_text_atomic
from infbench.core.errors import UserError
from infbench.report.render import render
from infbench.report.run_comparison_page import build_comparison_context
from infbench.runs.comparison import comparison_record, gate_record
from infbench.runs.results import load_run


def write_comparison(
    locations: list[str | Path],
    *,
    html: str | Path,
    template: str | Path,
    json_path: str | Path | None = None,
    sources: list[str] | None = None,
    threshold: float = 0.10,
    labels: list[str] | None = None,
    gate_patterns: list[str] | None = None,
) -> tuple[dict, list[str]]:
    """The comparison record and the gate's regressions (empty without a gate, or when none regressed).
    `sources` names each run where its local path is not what the user gave (a fetched URL)."""
    if len(locations) < 2:
        raise UserError("a comparison needs at least two runs: a baseline and a candidate")
    if labels and len(labels) != len(locations):
        raise UserError(f"{len(labels)} labels given for {len(locations)} runs: give one per run, in order")
    if not 0 <= threshold < 1:
        raise UserError(f"threshold {threshold} is not a fraction: give e.g. 0.05 for 5 %")
    runs = [load_run(location, source) for location, source in zip(locations, sources or locations)]
    record = comparison_record(runs, threshold, labels)
    record["gate"] = gate_record(record, gate_patterns) if gate_patterns else None
    regressions = record["gate"]["regressions"] if gate_patterns else []
    if json_path:
        write_json(json_path, record, "run_comparison")
    context = build_comparison_context(record)
    write_text_atomic(html, render(context, template))
    return record, regressions


def verdict_counts(record: dict) -> list[str]:
    """One line per candidate: how many figures got each verdict."""
    return [
        f"{c['candidate']} vs {c['baseline']}: " + ", ".join(f"{n} {verdict}" for verdict, n in c["counts"].items())
        for c in record["comparisons"]
    ]
