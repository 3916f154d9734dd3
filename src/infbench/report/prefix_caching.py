"""Section 5.2: prefix caching off and on: per request set, the hits predicted and measured, and
what prefix caching gained."""

from __future__ import annotations

import pandas as pd

from infbench.report.serve import interval_text


def set_table(study: dict) -> pd.DataFrame:
    rows = []
    for prefix_set in study["sets"]:
        name = prefix_set["name"]
        passes = [r[name] for r in study["rounds"]]
        hit_rate = sum(p["on"]["hit_rate"] for p in passes) / len(passes)
        gains = prefix_set["gains"]
        rows.append(
            {
                "request set": name.replace("_", " "),
                "requests": len(prefix_set["requests"]),
                "prompt tokens": sum(r["prompt_tokens"] for r in prefix_set["requests"]),
                "predicted hit rate %": 100 * prefix_set["predicted"]["hit_rate"],
                "predicted shared blocks": prefix_set["predicted"]["shared_blocks"],
                "measured hit rate % (on)": 100 * hit_rate,
                "median TTFT on / off": gains["median_ttft_ms"]["ratio"],
                "TTFT ci95": interval_text(gains["median_ttft_ms"], 2),
                "output tok/s on / off": gains["output_throughput"]["ratio"],
                "tok/s ci95": interval_text(gains["output_throughput"], 2),
            }
        )
    return pd.DataFrame(rows)


def view(study: dict | None) -> dict | None:
    """What the section shows; None where the study did not run."""
    if not study:
        return None
    return {
        "rounds": len(study["rounds"]),
        "concurrency": study["settings"]["concurrency"],
        "sets": [{"name": s["name"].replace("_", " "), "description": s["description"]} for s in study["sets"]],
        "block_size": study["sets"][0]["predicted"]["block_size"],
        "table": set_table(study),
    }
