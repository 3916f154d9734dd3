"""Section 4: paging, what the study left out: output tokens and block size on its five requests,
byte budgets, where KV memory goes per strategy, capacity against block size, vLLM's
pool-sizing formula and the live KV check."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from infbench.report.figures import figure
from infbench.report.tables import fmt
from infbench.stages import SECTION

BUDGET_STRATEGIES = ("contiguous_512", "paged_16", "paged_128")
CATEGORIES = ["token states", "reservation", "internal fragmentation", "external fragmentation"]
COLOURS = ["#2a6fdb", "#f2a93b", "#d9534f", "#7f7f7f"]


def breakdown(trace: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "strategy": s["strategy"],
                **{k.replace("_", " "): v for k, v in s["shares"].items()},
                "utilisation": s["utilisation"],
                "requests at once (static)": s["static_capacity"],
                "mean running (replay)": s["mean_running"],
                "preemptions": s["preemptions"],
            }
            for s in trace["strategies"]
        ]
    )


def waste_figure(sharegpt: pd.DataFrame, paper_utilisation: dict):
    def draw(ax):
        left = pd.Series(0.0, index=sharegpt.index)
        for category, colour in zip(CATEGORIES, COLOURS):
            ax.barh(sharegpt["strategy"], sharegpt[category] * 100, left=left * 100, color=colour, label=category)
            left += sharegpt[category]
        for name, share in paper_utilisation.items():
            ax.axvline(share * 100, color="black", lw=0.6, ls=":")
            ax.text(share * 100, -0.6, name.replace("_", " "), fontsize=7, rotation=90, va="bottom", ha="center")
        ax.set_xlabel("share of KV memory (%), averaged over the replay")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=7, frameon=False)
        ax.invert_yaxis()

    return figure(
        "Where KV memory goes, ShareGPT-like trace",
        draw,
        sharegpt[["strategy", *CATEGORIES, "utilisation"]],
        "Dotted lines: the utilisation (token states / allocated) the PagedAttention paper reports "
        "(Orca Max / Pow2 / Oracle, vLLM).",
        size=(7.5, 4.6),
    )


def block_size_figure(capacity: pd.DataFrame):
    def draw(ax):
        sns.lineplot(data=capacity, x="block size", y="requests at once", hue="trace", marker="o", ax=ax)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(capacity["block size"].unique()), labels=sorted(capacity["block size"].unique()))

    return figure(
        "Capacity vs block size (same byte budget)",
        draw,
        capacity,
        "Requests that fit at once at their peak length; vLLM's CPU default is 128.",
    )


def block_size_table(allocator: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "trace": trace["name"],
                "block size": strategy["block_size"],
                "requests at once": strategy["static_capacity"],
                "utilisation": strategy["utilisation"],
            }
            for trace in allocator["traces"]
            for strategy in trace["strategies"]
            if strategy["kind"] == "paged" and not strategy["shared_prefix"]
        ]
    )


def view(allocator: dict | None, kv_validation: dict | None, paging_live: dict | None = None) -> dict | None:
    """What the section shows; None without the allocator analysis. With paging_live the page
    has the live 4.8x section too."""
    if not allocator:
        return None
    breakdowns = {trace["name"]: breakdown(trace) for trace in allocator["traces"]}
    figures = []
    if "sharegpt_like" in breakdowns:
        figures.append(waste_figure(breakdowns["sharegpt_like"], allocator["paper_utilisation"]))
    capacity = block_size_table(allocator)
    if not capacity.empty:
        figures.append(block_size_figure(capacity))
    workload = next((t for t in allocator["traces"] if t["name"] == "workload"), None)
    pool = allocator["pool_sizing_check"]
    # An artifact from before kv_validation.json stored its check has none to show.
    live_check = next(iter((kv_validation or {}).get("checks", [])), None)
    return {
        # Where the page measures how many requests a pool admits live.
        "live_sections": (
            f"sections {SECTION['capacity'].number} and {SECTION['paging_live'].number}"
            if paging_live
            else f"section {SECTION['capacity'].number}"
        ),
        "extensions": pd.DataFrame(allocator["study"]["extensions"]),
        "kv_bytes_per_token": f"{allocator['kv_bytes_per_token']:,}",
        "dtype": allocator["dtype"],
        "strategies": BUDGET_STRATEGIES,
        "budgets": [
            {
                "budget": budget["budget"],
                "bytes": f"{budget['bytes']:,}",
                "cells": [
                    (budget[k]["users_at_peak"], fmt(budget[k]["mean_running_during_decoding"], 1))
                    for k in BUDGET_STRATEGIES
                ],
            }
            for budget in allocator["study"]["byte_budgets"]
        ],
        "figures": figures,
        # The workload trace: the outputs vLLM produced against the max_tokens the requests asked for.
        "workload_trace": {
            "produced": fmt(workload["mean_output"], 1),
            "asked": fmt(workload["mean_max_tokens"], 1),
            "stopped_early": workload["mean_output"] < workload["mean_max_tokens"],
        }
        if workload
        else None,
        "breakdowns": list(breakdowns.items()),
        "pool": {
            "status": pool["status"],
            "formula": pool["formula"],
            "predicted_blocks": pool["predicted"]["num_blocks"],
            "vllm_blocks": pool["vllm"]["num_blocks"],
            "confirms": pool["confirms"],
        },
        "live": {
            "status": live_check["status"],
            "detail": live_check["detail"],
            "fit": f"at least {(1 - kv_validation['max_outside_allowed']) * 100:.0f} % of each level's samples",
            "told_apart": f"{kv_validation['max_outside_allowed'] * 100:.0f} %",
        }
        if live_check
        else None,
    }
