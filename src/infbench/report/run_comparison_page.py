"""The run comparison as a page: what differs between the runs first, then per candidate the
verdicts, one plot of every ratio per stage with its interval and the threshold band, and the
numbers side by side."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from infbench.report.figures import figure
from infbench.report.tables import fmt
from infbench.runs.comparison import (
    CAPACITY_METHOD,
    FASTER,
    NO_DIFFERENCE,
    NO_INTERVAL,
    SLOWER,
    STAGE_TITLES,
)

VERDICT_CLASS = {FASTER: "pass", SLOWER: "fail", NO_DIFFERENCE: "pending", NO_INTERVAL: "warn"}
DIGITS = {"req/s": 3}  # decimals shown per unit; 1 for the rest
VERDICT_COLOUR = {FASTER: "#1e7d32", SLOWER: "#c62828", NO_DIFFERENCE: "#5b6475", NO_INTERVAL: "#b26a00"}


def with_interval(summary: dict, digits: int) -> str:
    """mean [low, high] (n), or mean (n) where one sample gives no interval."""
    text = fmt(summary["mean"], digits)
    if math.isfinite(summary["ci95_low"]):
        text += f" [{fmt(summary['ci95_low'], digits)}, {fmt(summary['ci95_high'], digits)}]"
    return f"{text} (n={summary['n']})"


def ratio_text(row: dict) -> str:
    text = f"{row['ratio']:.3f}"
    if math.isfinite(row["ci95_low"]):
        text += f" [{row['ci95_low']:.3f}, {row['ci95_high']:.3f}]"
    return text


def ratio_plot(rows: list[dict], title: str, threshold: float):
    """candidate / baseline per figure on a log axis, with its interval and the band inside which
    no verdict is drawn."""
    names = [f"{row['case']} · {row['metric']}" for row in rows]
    ratios = np.array([row["ratio"] for row in rows])
    low = np.array([row["ci95_low"] if math.isfinite(row["ci95_low"]) else row["ratio"] for row in rows])
    high = np.array([row["ci95_high"] if math.isfinite(row["ci95_high"]) else row["ratio"] for row in rows])

    def draw(ax):
        y = np.arange(len(rows))[::-1]
        ax.axvspan(1 / (1 + threshold), 1 + threshold, color="#dde2ea", alpha=0.7, label=f"±{threshold:.0%} threshold")
        ax.axvline(1.0, color="#5b6475", linewidth=1)
        for verdict, colour in VERDICT_COLOUR.items():
            chosen = [i for i, row in enumerate(rows) if row["verdict"] == verdict]
            if chosen:
                ax.errorbar(
                    ratios[chosen],
                    y[chosen],
                    xerr=[ratios[chosen] - low[chosen], high[chosen] - ratios[chosen]],
                    fmt="o",
                    color=colour,
                    capsize=3,
                    label=verdict,
                )
        ax.set_xscale("log")
        # Plain numbers at 1-2-5 steps on the log axis (its default labels are mathtext powers of ten).
        left, right = ax.get_xlim()
        steps = [m * 10.0**e for e in range(-4, 5) for m in (1, 2, 5)]
        ax.xaxis.set_major_locator(FixedLocator([step for step in steps if left <= step <= right]))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yticks(y, names, fontsize=8)
        ax.set_xlabel("candidate / baseline (95 % interval), log scale")
        ax.legend(fontsize=8, loc="lower right")

    table = pd.DataFrame(
        {
            "figure": names,
            "candidate / baseline": ratios,
            "ci95 low": [row["ci95_low"] for row in rows],
            "ci95 high": [row["ci95_high"] for row in rows],
            "verdict": [row["verdict"] for row in rows],
        }
    )
    caption = (
        "Right of 1 means a larger figure in the candidate: faster for throughput and goodput, slower for "
        "latencies. A verdict needs the whole interval outside the shaded band."
    )
    return figure(title, draw, table, caption, size=(7.5, 1.2 + 0.24 * len(rows)))


def stage_blocks(comparison: dict, threshold: float) -> list[dict]:
    """Per model and stage: the rows side by side, and their ratio plot."""
    blocks = []
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in comparison["figures"]:
        groups.setdefault((row["model"], row["stage"]), []).append(row)
    for (model, stage), rows in groups.items():
        title = f"{model}: {STAGE_TITLES.get(stage, stage)}"
        blocks.append(
            {
                "title": title,
                "samples_are": rows[0]["samples_are"],
                "rows": [
                    {
                        **row,
                        "baseline_text": with_interval(row["baseline"], DIGITS.get(row["unit"], 1)),
                        "candidate_text": with_interval(row["candidate"], DIGITS.get(row["unit"], 1)),
                        "ratio_text": ratio_text(row),
                        "verdict_class": VERDICT_CLASS[row["verdict"]],
                    }
                    for row in rows
                ],
                "figure": ratio_plot(rows, title, threshold),
            }
        )
    return blocks


CAPACITY_CLASS = {"lower": "fail", "higher": "pass", NO_DIFFERENCE: "pending", NO_INTERVAL: "pending"}


def capacity_text(estimate: dict) -> str:
    """A fitted capacity as `44 [38, 51]`; an end outside the probed range as below / above."""

    def shown(value):
        return value if isinstance(value, str) else f"{value:.3g}"

    if estimate["value"] is None or not estimate["ci95"]:
        return "none"  # nothing measured
    low, high = estimate["ci95"]
    return f"{shown(estimate['value'])} [{shown(low)}, {shown(high)}]"


def runs_text(runs: dict | None) -> str:
    """Two runs' capacities over their capacity.runs, as `7, 6, 2 -> 8, 9, 7: 1.6x [0.71, 3.7]`."""
    if not runs:
        return "not over runs (one side ran once, a run lies off its probed range, or no run varied): by the intervals"
    ratio = runs["ratio"]
    values = " -> ".join(", ".join(f"{v:.3g}" for v in runs[side]) for side in ("baseline", "candidate"))
    return f"{values}: {ratio['ratio']:.2f}x [{ratio['ci95_low']:.2f}, {ratio['ci95_high']:.2f}]"


def build_comparison_context(record: dict) -> dict:
    """The page's context, from the comparison record alone (its gate included, as the JSON holds it)."""
    return {
        "record": record,
        "runs": record["runs"],
        "differences": record["differences"],
        "candidates": [
            {
                **comparison,
                "blocks": stage_blocks(comparison, record["threshold"]),
                "capacity_rows": [
                    {
                        **row,
                        "baseline_text": capacity_text(row["baseline"]),
                        "candidate_text": capacity_text(row["candidate"]),
                        "verdict_class": CAPACITY_CLASS[row["verdict"]],
                        "runs_text": runs_text(row.get("runs")),
                    }
                    for row in comparison.get("capacities", [])
                ],
            }
            for comparison in record["comparisons"]
        ],
        "capacity_method": CAPACITY_METHOD,
        "gate": record.get("gate"),
        "verdict_class": VERDICT_CLASS,
    }
