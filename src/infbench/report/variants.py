"""Section 5.4: variants measured in turns, each figure against the baseline's by paired rounds."""

from __future__ import annotations

import pandas as pd

METRIC_NAMES = {
    "output_throughput": "output tok/s",
    "request_goodput": "goodput req/s",
    "median_ttft_ms": "median TTFT ms",
    "median_tpot_ms": "median TPOT ms",
    "median_itl_ms": "median ITL ms",
    "median_e2el_ms": "median E2E ms",
}


CHANGES = ("engine", "flags", "env", "python")


def changes_text(variant: dict) -> str:
    """What a variant changes from the config's server (an endpoint: where it runs; never a key)."""
    if variant.get("endpoint"):
        return f"endpoint {variant['endpoint']['base_url']} ({variant['endpoint']['model']})"
    return "; ".join(f"{key} {variant[key]}" for key in CHANGES if variant.get(key))


def interval(figure: dict) -> str:
    """The paired 95 % interval; blank where there is none (a pass with failures, or a figure
    not above zero)."""
    if figure["p_slower"] is None:
        return ""
    return f"[{figure['ci95_low']:.3f}, {figure['ci95_high']:.3f}]"


def ratio_table(variants: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "variant": comparison["candidate"],
                "level": figure["case"],
                "figure": METRIC_NAMES[figure["metric"]],
                "baseline, mean of rounds": figure["baseline"]["mean"],
                "variant, mean of rounds": figure["candidate"]["mean"],
                "ratio, geometric mean of rounds": figure["ratio"],
                "ci95": interval(figure),
                "verdict": figure["verdict"],
            }
            for comparison in variants["comparisons"]
            for figure in comparison["figures"]
        ]
    )


def view(variants: dict | None) -> dict | None:
    """What the section shows; None where the stage did not run."""
    if not variants:
        return None
    settings = variants["settings"]
    return {
        "baseline": variants["baseline"],
        "variants": [
            (
                variant["name"],
                changes_text(variant),
                variants.get("vllm_versions", {}).get(variant["name"]),  # runs before it was recorded lack it
            )
            for variant in settings["list"]
        ],
        "rounds": len(variants["rounds"]),
        "requests": settings["requests"],
        "threshold": variants["threshold"],
        "orders": [" → ".join(r["order"]) for r in variants["rounds"][:2]],
        "table": ratio_table(variants),
    }
