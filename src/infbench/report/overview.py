"""The overview: the figures a deployment decision starts from, one column per model."""

from __future__ import annotations

import pandas as pd

from infbench.core.capacity_terms import capacity_text, load_text
from infbench.report.serve import interval_text, level_label


def overview_row(model: str, artifacts: dict) -> dict:
    row = {"model": model}
    comparison = artifacts.get("offline_comparison")
    for ratio in (comparison or {}).get("ratios", []):
        key = f"vLLM/HF tok/s, {ratio['vllm_scenario']} vs {ratio['hf_scenario']}"
        tp = ratio["output_throughput"]
        row[key] = f"{tp['ratio']:.2f}× [{tp['ci95_low']:.2f}, {tp['ci95_high']:.2f}]"
    allocator = artifacts.get("allocator")
    if allocator:
        for trace in allocator["traces"]:
            if trace["name"] == "sharegpt_like":
                for s in trace["strategies"]:
                    if s["strategy"] in ("contiguous_max_model_len", "paged_16", "paged_128"):
                        row[f"KV utilisation, {s['strategy']} (ShareGPT-like)"] = f"{s['utilisation']:.1%}"
    load = artifacts.get("load")
    if load:
        best = max(load["levels"], key=lambda level: level["across_repeats"]["output_throughput"]["mean"])
        throughput = best["across_repeats"]["output_throughput"]
        # The highest of the serving levels, not the server's peak: the capacity probes go higher.
        row["highest serving level's output tok/s (level)"] = (
            f"{throughput['mean']:.1f} {interval_text(throughput)} ({level_label(best)})"
        )
    capacity = artifacts.get("capacity")
    if capacity:
        slo = ", ".join(f"{key} {value:g} ms" for key, value in capacity["slo_ms"].items())
        for mode, name in (("concurrency", "requests in flight"), ("request_rate", "request rate")):
            search = capacity.get(mode)
            if search:
                first_failing = load_text(mode, search["first_failing"])
                row[f"SLO capacity, {name} ({capacity['attainment_target']:.0%} within {slo})"] = (
                    f"{capacity_text(mode, search)} (first failing {first_failing}; "
                    f"{search['binding']['limit'].replace('_', ' ')} binds)"
                )
        if capacity["cost"]["per_million_output_tokens"] is not None:
            row["cost per million output tokens at capacity"] = (
                f"{capacity['cost']['per_million_output_tokens']:.2f} {capacity['cost']['currency']}"
            )
    paging = artifacts.get("paging_live")
    if paging:
        contiguous, paged = (server["vllm"]["peak_num_requests_running"] for server in paging["servers"])
        settings, lent = paging["settings"], paging["servers"][0]["simulator"]["lent_slots"]
        blocks = f"{settings['max_model_len']}-token blocks vs paged"
        row[f"requests at once on {lent:,} lent slots each, {blocks} (vLLM live)"] = (
            f"{contiguous:.0f} vs {paged:.0f}: {paging['live_ratio']:.2f}× (study {paging['study']['ratio']:.1f}×)"
        )
    utilisation = artifacts.get("utilisation")
    if utilisation and utilisation["rows"]:
        top = max(utilisation["rows"], key=lambda r: r["mbu"])
        row["highest memory bandwidth utilisation"] = f"{top['mbu']:.0%} ({top['stage']} {top['case']})"
    return row


def overview_table(rows: list[dict]) -> pd.DataFrame:
    """One row per figure, one column per model."""
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).set_index("model").T.rename_axis("figure").reset_index()
