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


def capacity_slo(capacity: dict | None) -> str | None:
    """The SLO the capacities are for, as the section says it."""
    if not capacity:
        return None
    bounds = ", ".join(f"{name.upper()} {ms:g} ms" for name, ms in capacity["slo_ms"].items())
    return f"at least {capacity['attainment_target'] * 100:.0f} % of requests within {bounds}"


def capacity_table(variants: dict) -> pd.DataFrame | None:
    """Each variant's SLO capacity (its concurrency search), the limit that bound it and the
    verdict against the baseline's; None where variants.capacity was off."""
    capacity = variants.get("capacity")
    if not capacity:
        return None
    verdicts = {
        comparison["candidate"]: row["verdict"]
        for comparison in variants["comparisons"]
        for row in comparison.get("capacities", [])
    }
    rows = []
    for name, search in capacity["searches"].items():
        estimate = search.get("estimate") or {}
        low, high = estimate.get("ci95") or (None, None)
        rows.append(
            {
                "variant": name,
                "capacity, fitted": estimate.get("value"),
                "ci95": "" if low is None else f"[{low:.1f}, {high:.1f}]",
                "highest passing probe": search["capacity"],
                "search": search["outcome"],
                "binding limit": search["binding"]["limit"],
                "probes": len(search["probes"]),
                "verdict": "baseline" if name == variants["baseline"] else verdicts.get(name, "no estimate"),
            }
        )
    return pd.DataFrame(rows)


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
        "capacity_slo": capacity_slo(variants.get("capacity")),
        "capacity_table": capacity_table(variants),
    }
