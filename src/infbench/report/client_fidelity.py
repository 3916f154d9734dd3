"""Section 5.1: is the client exact? vLLM's benchmark client beside this pipeline's, ours / vLLM's
per figure."""

from __future__ import annotations

import pandas as pd

from infbench.report.serve import interval_text


def fidelity_table(fidelity: dict) -> pd.DataFrame:
    """Ours / vLLM's per compared figure, with its interval, per-round ratios and verdict."""
    status = {item["name"].removeprefix("client_fidelity_"): item["status"] for item in fidelity["checks"]}
    return pd.DataFrame(
        [
            {
                "figure": key,
                "ours / vLLM's": ratio["ratio"],
                "ci95": interval_text(ratio, 3),
                "per round": ", ".join("–" if r is None else f"{r:.3f}" for r in ratio["round_ratios"]),
                "ours (median over rounds)": pd.Series([r["ours"][key] for r in fidelity["rounds"]]).median(),
                "vLLM's (median over rounds)": pd.Series([r["vllm"][key] for r in fidelity["rounds"]]).median(),
                "within ±5 %": status.get(key, ""),
            }
            for key, ratio in fidelity["ratios"].items()
        ]
    )


def view(fidelity: dict | None) -> dict | None:
    """What the section shows; None where the comparison did not run."""
    if not fidelity:
        return None
    settings = fidelity["settings"]
    return {
        "rounds": settings["rounds"],
        "requests": settings["requests"],
        "output_tokens": settings["output_tokens"],
        "concurrency": settings["concurrency"],
        "table": fidelity_table(fidelity),
    }
