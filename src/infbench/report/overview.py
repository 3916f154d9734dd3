"""The answer a deployer can forward (per model: the SLO capacity, what binds, a rerun's
range, the cost, vLLM over HF, the checks that failed); the overview: the figures a decision
starts from, one column per model, and every measured load's per-user against total output
speed."""

from __future__ import annotations

import pandas as pd

from infbench.core.capacity_terms import IN_SESSIONS, SEARCHES, capacity_text, load_text, rerun_text
from infbench.core.metrics import MS
from infbench.report.capacity import LIMITS, estimate_text
from infbench.report.figures import figure
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
        for mode, name in SEARCHES.items():
            search = capacity.get(mode)
            if search:
                first_failing = load_text(mode, search["first_failing"])
                row[f"SLO capacity, {name} ({capacity['attainment_target']:.0%} within {slo})"] = (
                    f"{capacity_text(mode, search)} (first failing {first_failing}; "
                    f"{search['binding']['limit'].replace('_', ' ')} binds; a rerun: {rerun_text(mode, capacity)})"
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


def answer(model: str, artifacts: dict, checks: list[dict]) -> dict:
    """One model's answer, as (question, answer) rows: what it serves within the SLO and what
    binds it, where a rerun's capacity falls, the cost, vLLM over HF, and every failed check."""
    rows = []
    capacity = artifacts.get("capacity")
    if capacity:
        slo = " and ".join(f"{metric.upper()} ≤ {limit:g} ms" for metric, limit in capacity["slo_ms"].items())
        for mode, name in SEARCHES.items():
            search = capacity.get(mode)
            if search:
                decided = "turns" if mode in IN_SESSIONS else "requests"  # users are decided per turn
                within = f"{capacity['attainment_target']:.0%} of {decided} within {slo}"
                fitted = estimate_text(mode, search.get("estimate"))
                rows.append((f"{name} served, {within}", f"{capacity_text(mode, search)} (fitted {fitted})"))
                rows.append((f"{name}: a rerun", rerun_text(mode, capacity)))
        rows.append(("what binds it", LIMITS[capacity["concurrency"]["binding"]["limit"]]))
        cost = capacity["cost"]
        if cost["per_million_output_tokens"] is not None:
            rows.append(
                ("cost per million output tokens", f"{cost['per_million_output_tokens']:.2f} {cost['currency']}")
            )
    ratios = (artifacts.get("offline_comparison") or {}).get("ratios", [])
    best = next((r for r in ratios if r["vllm_scenario"] == "workload_continuous"), ratios[0] if ratios else None)
    if best:
        tp = best["output_throughput"]
        rows.append(
            (
                f"vLLM over HF, output tok/s ({best['vllm_scenario']} vs {best['hf_scenario']})",
                f"{tp['ratio']:.2f}× [{tp['ci95_low']:.2f}, {tp['ci95_high']:.2f}]",
            )
        )
    failed = [f"{c['stage']}: {c['name']}" for c in checks if c["model"] == model and c["status"] == "fail"]
    rows.append(("validity checks that failed", "; ".join(failed) or "none"))
    return {"model": model, "rows": rows}


def overview_table(rows: list[dict]) -> pd.DataFrame:
    """One row per figure, one column per model."""
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).set_index("model").T.rename_axis("figure").reset_index()


def speed_points(model: str, artifacts: dict) -> list[dict]:
    """Every serving level and capacity probe as (output tok/s, output tok/s per user), a user's
    speed being 1000 / its median TPOT in ms: the rate one streaming request's tokens arrive."""
    points = []
    for level in (artifacts.get("load") or {}).get("levels", []):
        figures = level["across_repeats"]
        if not (figures.get("median_tpot_ms") or {}).get("mean"):  # one output token: no TPOT
            continue
        points.append(
            {
                "model": model,
                "source": "serving level",
                "load": level_label(level),
                "output tok/s": figures["output_throughput"]["mean"],
                "output tok/s per user": MS / figures["median_tpot_ms"]["mean"],
            }
        )
    for mode in SEARCHES:
        for probe in ((artifacts.get("capacity") or {}).get(mode) or {}).get("probes", []):
            if probe.get("median_tpot_ms"):
                points.append(
                    {
                        "model": model,
                        "source": "capacity probe, " + ("met" if probe["met"] else "missed"),
                        "load": load_text(mode, probe["load"]),
                        "output tok/s": probe["output_throughput"]["mean"],
                        "output tok/s per user": MS / probe["median_tpot_ms"],
                    }
                )
    return points


def pareto_front(points: list[dict]) -> list[dict]:
    """The points no other point beats on both speeds (at least as fast for each user and in all,
    and faster in one), by total speed."""
    front = []
    for point in sorted(points, key=lambda p: (-p["output tok/s"], -p["output tok/s per user"])):
        if not front or point["output tok/s per user"] > front[-1]["output tok/s per user"]:
            front.append(point)
    return sorted(front, key=lambda p: p["output tok/s"])


def speed_figure(models: dict[str, dict]):
    """Per-user against total output speed over every level and probe, each model's Pareto
    front joined; None where nothing was served."""
    frame = pd.DataFrame([point for model, artifacts in models.items() for point in speed_points(model, artifacts)])
    if frame.empty:
        return None

    def draw(ax):
        markers = {"serving level": "o", "capacity probe, met": "^", "capacity probe, missed": "v"}
        for index, (model, points) in enumerate(frame.groupby("model", sort=False)):
            colour = f"C{index}"
            front = pd.DataFrame(pareto_front(points.to_dict("records")))
            ax.plot(
                front["output tok/s"], front["output tok/s per user"], color=colour, lw=1.2, label=f"{model}: front"
            )
            for source, group in points.groupby("source"):
                ax.scatter(
                    group["output tok/s"], group["output tok/s per user"], color=colour, marker=markers[source],
                    s=28, label=f"{model}: {source}" if len(models) > 1 else source,
                )  # fmt: skip
        ax.set_xlabel("output tokens per second, all requests")
        ax.set_ylabel("output tokens per second per user")
        ax.legend(fontsize=7, frameon=False)

    return figure(
        "Each user's speed against the server's, every level and probe",
        draw,
        frame,
        "Each point a serving level (mean over its repeats) or a capacity probe; a user's speed is 1000 / the "
        "median TPOT in ms. The line joins the points no other beats on both axes: along it, one user's speed "
        "is traded for the server's total. A capacity probe points up where it met the SLO, down where it missed.",
    )
