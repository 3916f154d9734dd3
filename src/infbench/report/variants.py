"""Section 5.4: variants measured in turns, each figure against the baseline's by paired rounds."""

from __future__ import annotations

import pandas as pd
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

from infbench.core.capacity_terms import undecided_bound
from infbench.report.capacity import estimate_text
from infbench.report.figures import figure

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


def ratio_figure(variants: dict):
    """Each figure's ratio to the baseline with its paired 95 % interval, on a log scale, beside
    the band the verdict needs the interval wholly past; None where no figure has an interval."""
    threshold = variants["threshold"]
    rows = pd.DataFrame(
        [
            {
                "row": f"{comparison['candidate']}, {one['case']}: {METRIC_NAMES[one['metric']]}",
                "ratio": one["ratio"],
                "ci95 low": one["ci95_low"],
                "ci95 high": one["ci95_high"],
                "verdict": one["verdict"],
            }
            for comparison in variants["comparisons"]
            for one in comparison["figures"]
            if one["p_slower"] is not None
        ]
    )
    if rows.empty:
        return None
    ratio = rows["ratio"]

    def draw(ax):
        y = range(len(rows))
        ax.axvspan(1 / (1 + threshold), 1 + threshold, color="#cccccc", alpha=0.5, lw=0)
        ax.axvline(1.0, color="#555555", lw=1)
        ax.errorbar(ratio, y, xerr=[ratio - rows["ci95 low"], rows["ci95 high"] - ratio], fmt="o", capsize=3)
        ax.set_xscale("log")
        # A narrow range on a log axis gets crowded minor labels (0.925, 0.95, ...): evenly spaced
        # plain ticks there; a wide one keeps the log ticks, labelled plainly.
        if rows["ci95 high"].max() / rows["ci95 low"].min() < 3:
            ax.xaxis.set_major_locator(MaxNLocator(6))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_yticks(list(y), list(rows["row"]), fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("variant / baseline (log scale)")

    return figure(
        "Each figure's ratio to the baseline, with its paired 95 % interval",
        draw,
        rows,
        f"The grey band is within {threshold * 100:.0f} % of the baseline (1 / (1 + threshold) to 1 + threshold): a "
        "verdict other than no difference needs the whole interval outside it, on the side that is worse or better "
        "for that figure (lower is better for latencies).",
        size=(7.5, 1.2 + 0.25 * len(rows)),
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
    rows = [
        {
            "variant": name,
            # An undecided end: the bound the verdict uses, not an interval the probes cannot back.
            "capacity, fitted [95 % CI]": undecided_bound("concurrency", search)
            or estimate_text("concurrency", search.get("estimate")),
            "highest passing probe": search["capacity"],
            "search": search["outcome"],
            "binding limit": search["binding"]["limit"],
            "probes": len(search["probes"]),
            "verdict": "baseline" if name == variants["baseline"] else verdicts.get(name, "no estimate"),
        }
        for name, search in capacity["searches"].items()
    ]
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
        "figures": [f for f in [ratio_figure(variants)] if f],
        "capacity_slo": capacity_slo(variants.get("capacity")),
        "capacity_table": capacity_table(variants),
    }
