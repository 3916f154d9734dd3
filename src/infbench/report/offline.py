"""Section 1–2: the Hugging Face baseline and vLLM offline on the same work, their ratios, the
study's figures beside them and whether both engines ran the same weights."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from infbench.core import study_figures
from infbench.report.figures import figure
from infbench.report.tables import fmt


def scenario_table(hf: dict | None, vllm: dict | None) -> pd.DataFrame:
    rows = []
    for artifact in (hf, vllm):
        if not artifact:
            continue
        for scenario in artifact["scenarios"]:
            summary = scenario["summary"]
            rows.append(
                {
                    "engine": artifact["engine"],
                    "scenario": scenario["name"],
                    "output tok/s": summary["output_throughput"]["mean"],
                    "ci95 low": summary["output_throughput"]["ci95_low"],
                    "ci95 high": summary["output_throughput"]["ci95_high"],
                    "mean TTFT ms": summary["mean_ttft_ms"]["mean"],
                    "mean TPOT ms": summary["mean_tpot_ms"]["mean"],
                    "mean E2E ms": summary["mean_e2el_ms"]["mean"],
                    "repeats": summary["duration"]["n"],
                    "peak RSS MiB": scenario["peak_rss_bytes"] / 2**20,
                    "KV held MiB": scenario.get("kv_cache_bytes_held", float("nan")) / 2**20,
                }
            )
    return pd.DataFrame(rows)


def throughput_figure(table: pd.DataFrame):
    def draw(ax):
        sns.barplot(
            data=table,
            y="scenario",
            x="output tok/s",
            hue="engine",
            ax=ax,
            errorbar=None,
            palette={"hf": "#8c8c8c", "vllm": "#2a6fdb"},
        )
        for patch_group, (_, group) in zip(ax.containers, table.groupby("engine", sort=False)):
            for bar, (_, row) in zip(patch_group, group.iterrows()):
                y = bar.get_y() + bar.get_height() / 2
                ax.plot([row["ci95 low"], row["ci95 high"]], [y, y], color="black", lw=1.2)
        ax.set_xlabel("output tokens per second (mean, 95 % CI)")
        ax.set_ylabel("")

    return figure(
        "Output throughput per scenario, HF vs vLLM",
        draw,
        table[["engine", "scenario", "output tok/s", "ci95 low", "ci95 high", "repeats"]],
        "Bars are means over the timed repeats; black lines are 95 % confidence intervals.",
        size=(7.5, 0.45 * len(table) + 1.2),
    )


def ratio_table(comparison: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "vLLM scenario": ratio["vllm_scenario"],
                "HF scenario": ratio["hf_scenario"],
                "throughput ratio": ratio["output_throughput"]["ratio"],
                "ci95 low": ratio["output_throughput"]["ci95_low"],
                "ci95 high": ratio["output_throughput"]["ci95_high"],
                "E2E latency ratio": ratio["mean_e2el"]["ratio"],
                "what it answers": ratio["meaning"],
            }
            for ratio in comparison.get("ratios", [])
        ]
    )


def rounds_table(interleaved: dict) -> pd.DataFrame:
    rows = []
    for ratio in interleaved.get("ratios", []):
        within, across = ratio["round_1_within_process"], ratio["across_rounds"]
        rows.append(
            {
                "vLLM scenario": ratio["vllm_scenario"],
                "HF scenario": ratio["hf_scenario"],
                "round 1 ratio": within["ratio"],
                "round 1 ci95 (within process)": f"[{within['ci95_low']:.2f}, {within['ci95_high']:.2f}]",
                "per-round ratios": ", ".join(f"{r:.2f}" for r in ratio["round_ratios"]),
                "paired ratio": across["ratio"],
                "ci95 across rounds": f"[{across['ci95_low']:.2f}, {across['ci95_high']:.2f}]",
            }
        )
    return pd.DataFrame(rows)


def study_view() -> dict:
    """The study's offline figures, as the section's box quotes them."""
    offline = study_figures.OFFLINE
    return {
        "hardware": offline["hardware"],
        "method": offline["method"],
        "figures": [
            {"engine": f["engine"], "scenario": f["scenario"], "tok_s": f["output_tok_s"]} for f in offline["figures"]
        ],
        "vllm_over_hf": f"{offline['vllm_over_hf']['study_single_50']:.2f}",
        "kv_cache_tokens": f"{offline['kv_cache_tokens']:,}",
    }


def view(hf: dict | None, vllm: dict | None, comparison: dict | None) -> dict | None:
    """What the section shows; None where neither engine ran."""
    settings = (vllm or hf or {}).get("settings")
    if not settings:
        return None
    comparison = comparison or {}
    table = scenario_table(hf, vllm)
    ratios = ratio_table(comparison)
    interleaved = comparison.get("interleaved_rounds") or {}
    rounds = rounds_table(interleaved)
    timing = (vllm or hf or {}).get("timing")
    agreement = comparison.get("agreement")
    facts = (vllm or {}).get("engine_facts")
    return {
        "dtype": settings["dtype"],
        "threads": settings["threads"],
        "pinned_cpus": ", ".join(str(cpu) for cpu in settings["pinned_cpus"]),
        "warmup_runs": settings["warmup_runs"],
        "warmup_max_tokens": settings.get("warmup_max_tokens"),  # absent: an older run, warm-ups whole
        "repeats": settings["repeats"],
        "prefix_caching": "on" if settings["prefix_caching"] else "off",
        # False: the study's single request alone; absent: an older run, whose workload ran too.
        "workload_scenarios": settings.get("workload_scenarios", True),
        "engine_reports": [
            {
                "engine": "HF" if a["engine"] == "hf" else "vLLM",
                "device": a["engine_report"]["device"],
                "dtype": a["engine_report"]["dtype"],
            }
            for a in (hf, vllm)
            if a
        ],
        "timing": {key: timing[key] for key in ("clock", "start", "ttft_end", "e2el_end", "duration_end")}
        if timing
        else None,
        "figures": [throughput_figure(table)] if not table.empty else [],
        "ratios": None if ratios.empty else ratios,
        "ratio_scope": (comparison.get("ratios") or [{}])[0].get("interval_scope"),
        "rounds": None if rounds.empty else rounds,
        "rounds_scope": interleaved.get("interval_scope"),
        "round_count": interleaved.get("rounds", 1),
        "study": study_view(),
        "agreement": {
            "status": "fail" if agreement["flagged"] else "pass",
            "verdict": "flagged" if agreement["flagged"] else "consistent",
            "note": agreement["note"],
            "mean_agreement": fmt(agreement["mean_agreement"], 2),
            "exact_matches": agreement["exact_matches"],
        }
        if agreement
        else None,
        "table": table,
        "engine": {
            "num_blocks": facts["num_blocks"],
            "block_size": facts["block_size"],
            "kv_capacity_tokens": f"{facts['kv_capacity_tokens']:,}",
            "max_concurrency": fmt(facts["max_concurrency_at_max_model_len"], 1),
            "max_model_len": facts["max_model_len"],
            "startup_s": fmt(facts["startup_s"], 1),
        }
        if facts
        else None,
    }
