"""The report's sections: each artifact shaped into the tables and figures the template shows."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import seaborn as sns

from infbench.core import study_figures
from infbench.report.capacity import capacity_text, load_text
from infbench.report.figures import figure


def offline_section(hf: dict | None, vllm: dict | None, comparison: dict | None) -> dict:
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
    table = pd.DataFrame(rows)
    figures = []
    if not table.empty:

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

        figures.append(
            figure(
                "Output throughput per scenario, HF vs vLLM",
                draw,
                table[["engine", "scenario", "output tok/s", "ci95 low", "ci95 high", "repeats"]],
                "Bars are means over the timed repeats; black lines are 95 % confidence intervals.",
                size=(7.5, 0.45 * len(table) + 1.2),
            )
        )
    ratios = []
    for ratio in (comparison or {}).get("ratios", []):
        ratios.append(
            {
                "vLLM scenario": ratio["vllm_scenario"],
                "HF scenario": ratio["hf_scenario"],
                "throughput ratio": ratio["output_throughput"]["ratio"],
                "ci95 low": ratio["output_throughput"]["ci95_low"],
                "ci95 high": ratio["output_throughput"]["ci95_high"],
                "E2E latency ratio": ratio["mean_e2el"]["ratio"],
                "what it answers": ratio["meaning"],
            }
        )
    rounds = []
    interleaved = (comparison or {}).get("interleaved_rounds")
    for ratio in (interleaved or {}).get("ratios", []):
        within, across = ratio["round_1_within_process"], ratio["across_rounds"]
        rounds.append(
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
    study_rows = [
        {"scenario": f["scenario"], "engine": f["engine"], "output tok/s (study)": f["output_tok_s"]}
        for f in study_figures.OFFLINE["figures"]
    ]
    return {
        "table": table,
        "figures": figures,
        "ratios": pd.DataFrame(ratios),
        "ratio_scope": ((comparison or {}).get("ratios") or [{}])[0].get("interval_scope"),
        "rounds": pd.DataFrame(rounds),
        "rounds_scope": (interleaved or {}).get("interval_scope"),
        "round_count": (interleaved or {}).get("rounds", 1),
        "study": pd.DataFrame(study_rows),
        "agreement": (comparison or {}).get("agreement"),
        "engine_facts": (vllm or {}).get("engine_facts"),
        "settings": (vllm or hf or {}).get("settings"),
        "timing": (vllm or hf or {}).get("timing"),
        "engine_reports": {a["engine"]: a["engine_report"] for a in (hf, vllm) if a},
    }


def allocator_section(allocator: dict | None, kv_validation: dict | None) -> dict | None:
    if not allocator:
        return None
    study_table = allocator["study"]["table"]
    reported = allocator["study"]["reported"]
    # Counts and shares share a column: object dtype keeps each value's type (a count stays an integer).
    study_rows = pd.DataFrame(
        [
            {"figure": key.replace("_", " "), "study reported": reported[key], "reproduced": study_table[key]}
            for key in reported
        ],
        dtype=object,
    )
    figures, breakdowns = [], {}
    for trace in allocator["traces"]:
        rows = [
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
        breakdowns[trace["name"]] = pd.DataFrame(rows)
    sharegpt = breakdowns.get("sharegpt_like")
    if sharegpt is not None:
        categories = ["token states", "reservation", "internal fragmentation", "external fragmentation"]
        colours = ["#2a6fdb", "#f2a93b", "#d9534f", "#7f7f7f"]

        def draw(ax):
            left = pd.Series(0.0, index=sharegpt.index)
            for category, colour in zip(categories, colours):
                ax.barh(sharegpt["strategy"], sharegpt[category] * 100, left=left * 100, color=colour, label=category)
                left += sharegpt[category]
            for name, share in allocator["paper_utilisation"].items():
                ax.axvline(share * 100, color="black", lw=0.6, ls=":")
                ax.text(share * 100, -0.6, name.replace("_", " "), fontsize=7, rotation=90, va="bottom", ha="center")
            ax.set_xlabel("share of KV memory (%), averaged over the replay")
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=7, frameon=False)
            ax.invert_yaxis()

        figures.append(
            figure(
                "Where KV memory goes, ShareGPT-like trace",
                draw,
                sharegpt[["strategy", *categories, "utilisation"]],
                "Dotted lines: the utilisation (token states / allocated) the PagedAttention paper reports "
                "(Orca Max / Pow2 / Oracle, vLLM).",
                size=(7.5, 4.6),
            )
        )
    capacity_rows = []
    for trace in allocator["traces"]:
        for strategy in trace["strategies"]:
            if strategy["kind"] == "paged" and not strategy["shared_prefix"]:
                capacity_rows.append(
                    {
                        "trace": trace["name"],
                        "block size": strategy["block_size"],
                        "requests at once": strategy["static_capacity"],
                        "utilisation": strategy["utilisation"],
                    }
                )
    capacity = pd.DataFrame(capacity_rows)
    if not capacity.empty:

        def draw(ax):
            sns.lineplot(data=capacity, x="block size", y="requests at once", hue="trace", marker="o", ax=ax)
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(capacity["block size"].unique()), labels=sorted(capacity["block size"].unique()))

        figures.append(
            figure(
                "Capacity vs block size (same byte budget)",
                draw,
                capacity,
                "Requests that fit at once at their peak length; vLLM's CPU default is 128.",
            )
        )
    return {
        "study_rows": study_rows,
        "matches": allocator["study"]["matches_study"],
        "by_admission": allocator["study"]["by_admission"],
        "extensions": pd.DataFrame(allocator["study"]["extensions"]),
        "budgets": allocator["study"]["byte_budgets"],
        "breakdowns": breakdowns,
        "figures": figures,
        "pool_sizing": allocator["pool_sizing_check"],
        "trace_lengths": {t["name"]: (t["mean_output"], t["mean_max_tokens"]) for t in allocator["traces"]},
        "live": kv_validation,
        "kv_bytes_per_token": allocator["kv_bytes_per_token"],
        "dtype": allocator["dtype"],
    }


def level_label(level: dict) -> str:
    prefix = "chat " if level.get("api") == "chat" else ""
    if level["mode"] == "concurrency":
        return f"{prefix}c={level['max_concurrency']}"
    rate = f"{level['request_rate']}" + (f"→{level['ramp_end_rate']}" if level.get("ramp_end_rate") else "")
    cap = f", ≤{level['max_concurrency']}" if level["max_concurrency"] else ""
    return f"{prefix}{rate} req/s{cap}"


def interval_text(summary: dict, digits: int = 1) -> str:
    """A 95 % interval as text; a dash where one repeat leaves it undefined."""
    low, high = summary["ci95_low"], summary["ci95_high"]
    if low is None or high is None or low != low or high != high:
        return "–"
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def shown_tail(levels: list[dict]) -> int:
    """The tail percentile the serving table shows beside p90: p99 where some level's pooled
    requests support it, else p95 (the default 3 x 16 requests support p95, not p99)."""
    supported = {q for level in levels for q in level["percentile_support"]["e2el"]["supported"]}
    return 99 if 99 in supported else 95


def serving_section(
    server: dict | None, load: dict | None, tuning: dict | None, fidelity: dict | None = None
) -> dict | None:
    if not server or not load:
        return None
    levels = load["levels"]
    tail = shown_tail(levels)
    rows = []
    for level in levels:
        across = level["across_repeats"]
        support = level["percentile_support"]
        row = {
            "level": level_label(level),
            "passes × requests": f"{len(level['repeats'])} × {len(level['repeats'][0]['requests'])}",
            "output tok/s": across["output_throughput"]["mean"],
            "output tok/s ci95": interval_text(across["output_throughput"]),
        }
        for metric in ("ttft", "tpot"):
            row[f"median {metric} ms"] = across[f"median_{metric}_ms"]["mean"]
            row[f"median {metric} ms ci95"] = interval_text(across[f"median_{metric}_ms"])
        row["offered / achieved req/s"] = (
            f"{level['offered_request_rate']:.2f} / {level['achieved_request_rate']:.2f}"
            if level.get("offered_request_rate") is not None
            else ""
        )
        row["goodput req/s"] = level["request_goodput"]
        for metric in ("ttft", "tpot", "e2el"):
            if metric == "e2el":
                row["median e2el ms"] = across["median_e2el_ms"]["mean"]
            for q in (90, tail):
                # A percentile the pooled sample cannot support is left blank, not shown as if it meant something.
                supported = q in support[metric]["supported"]
                row[f"p{q} {metric} ms"] = level[f"p{q}_{metric}_ms"] if supported else None
        row["failed"] = level["failed"]
        peak_kv = level["peak_kv_cache_usage_perc"]
        row["peak KV %"] = peak_kv * 100 if peak_kv is not None else None
        rows.append(row)
    table = pd.DataFrame(rows)
    percentiles = [c for c in table.columns if c.startswith(("p90 ", f"p{tail} "))]
    table[percentiles] = table[percentiles].astype(float)
    figures = []
    # The sweep's curve: closed-loop levels of the workload's API (the chat levels beside a
    # completions sweep are another workload, shown in the table).
    closed = table[[level["mode"] == "concurrency" and level["api"] == levels[0]["api"] for level in levels]]

    def draw_curve(ax):
        sns.lineplot(data=closed, x="output tok/s", y="median e2el ms", marker="o", ax=ax, label="median E2E")
        sns.lineplot(data=closed, x="output tok/s", y=f"p{tail} e2el ms", marker="s", ax=ax, label=f"p{tail} E2E")
        for _, row in closed.iterrows():
            ax.annotate(
                row["level"],
                (row["output tok/s"], row["median e2el ms"]),
                fontsize=8,
                xytext=(4, -10),
                textcoords="offset points",
            )
        ax.set_ylabel("end-to-end latency (ms)")

    if not closed.empty:
        figures.append(
            figure(
                "Throughput vs latency across the concurrency sweep",
                draw_curve,
                closed[["level", "output tok/s", "median e2el ms", f"p{tail} e2el ms"]],
            )
        )
    long = table.melt(
        id_vars="level",
        value_vars=[c for c in table.columns if c.endswith(" ms")],
        var_name="statistic",
        value_name="ms",
    )
    long[["percentile", "metric"]] = long["statistic"].str.extract(r"(\w+) (\w+) ms")

    def draw_percentiles(ax):
        sns.barplot(data=long[long["metric"] != "e2el"], x="level", y="ms", hue="statistic", ax=ax)
        ax.set_ylabel("ms")
        ax.legend(fontsize=7, ncol=2)

    figures.append(
        figure(
            "TTFT and TPOT percentiles per level",
            draw_percentiles,
            table[["level", *[c for c in table.columns if c.endswith(" ms")]]],
            f"Medians are the mean of the repeats' medians; p90 and p{tail} are over every repeat's requests "
            "together, left out where that pool is too small for them.",
        )
    )
    ttft = pd.DataFrame(
        [
            {"level": level_label(level), "TTFT ms": r["ttft"] * 1000}
            for level in levels
            for repeat in level["repeats"]
            for r in repeat["requests"]
            if r["success"]
        ]
    )

    def draw_ttft(ax):
        sns.stripplot(data=ttft, x="level", y="TTFT ms", ax=ax, alpha=0.6, jitter=0.25)
        sns.boxplot(data=ttft, x="level", y="TTFT ms", ax=ax, showfliers=False, fill=False, color="black", width=0.5)

    figures.append(
        figure(
            "TTFT distribution per level",
            draw_ttft,
            ttft.groupby("level")["TTFT ms"].describe().reset_index(),
            "Every request of every repeat.",
        )
    )
    series = pd.DataFrame(
        [
            {
                "level": level_label(level),
                "t (s)": sample["t"],
                "KV cache usage %": 100 * sample.get("vllm:kv_cache_usage_perc", float("nan")),
                "running": sample.get("vllm:num_requests_running", float("nan")),
                "waiting": sample.get("vllm:num_requests_waiting", float("nan")),
            }
            for level in levels
            for sample in level["repeats"][0]["metrics_series"]
        ]
    )
    if not series.empty:

        def draw_series(ax):
            sns.lineplot(data=series, x="t (s)", y="running", hue="level", ax=ax)
            sns.lineplot(data=series, x="t (s)", y="waiting", hue="level", ax=ax, linestyle="--", legend=False)
            twin = ax.twinx()
            sns.lineplot(
                data=series, x="t (s)", y="KV cache usage %", hue="level", ax=twin, legend=False, alpha=0.5, linewidth=3
            )
            ax.set_ylabel("requests")
            twin.set_ylabel("KV cache usage (%)")
            twin.grid(False)

        figures.append(
            figure(
                "Server state during each level (scraped /metrics)",
                draw_series,
                series,
                "Requests running (solid lines) and waiting (dashed), and KV-cache usage (thick, "
                "right axis), over each level's first repeat.",
            )
        )
    tuning_table = None
    if tuning:
        tuning_table = pd.DataFrame(
            [
                {
                    **cell["settings"],
                    "SLO capacity (requests in flight)": cell["slo_capacity"]["capacity"],
                    "first failing": cell["slo_capacity"]["first_failing"],
                    "binding limit": cell["slo_capacity"]["binding"]["limit"].replace("_", " "),
                    "output tok/s at capacity": cell["slo_capacity"]["output_throughput_at_capacity"],
                    "output tok/s": cell["output_throughput"],
                    "median TTFT ms": cell["median_ttft_ms"],
                    "median TPOT ms": cell["median_tpot_ms"],
                    "p99 E2E ms": cell["p99_e2el_ms"],
                    "peak waiting": cell["peak_num_requests_waiting"],
                    "preemptions": cell["preemptions"],
                    "startup s": cell["startup_s"],
                }
                for cell in tuning["cells"]
            ]
        )
    return {
        "server": server,
        "table": table,
        "figures": figures,
        "repeats": len(levels[0]["repeats"]) if levels else 0,
        "placement": load["client_placement"],
        "chat_levels": any(level["api"] == "chat" for level in levels),
        "notes": load["notes"],
        "fidelity": fidelity_table(fidelity),
        "fidelity_meta": fidelity,
        "tuning": tuning_table,
        "tuning_meta": tuning,
        "study": study_figures.SERVER,
    }


def fidelity_table(fidelity: dict | None) -> pd.DataFrame | None:
    """Ours / vLLM's per compared figure, with its interval, per-round ratios and verdict."""
    if not fidelity:
        return None
    status = {item["name"].removeprefix("client_fidelity_"): item["status"] for item in fidelity["checks"]}
    return pd.DataFrame(
        [
            {
                "figure": key,
                "ours / vLLM's": ratio["ratio"],
                "ci95": interval_text(ratio, 3),
                "per round": ", ".join(f"{r:.3f}" for r in ratio["round_ratios"]),
                "ours (median over rounds)": pd.Series([r["ours"][key] for r in fidelity["rounds"]]).median(),
                "vLLM's (median over rounds)": pd.Series([r["vllm"][key] for r in fidelity["rounds"]]).median(),
                "within ±5 %": status.get(key, ""),
            }
            for key, ratio in fidelity["ratios"].items()
        ]
    )


def read_benchmarks(paths: list[str]) -> pd.DataFrame:
    rows = []
    for path in paths:
        with open(path) as handle:
            record = next(csv.DictReader(handle, delimiter="\t"))
        rows.append(
            {
                "rule": Path(path).stem,
                "model": Path(path).parent.name,
                "seconds": float(record["s"]),
                "max RSS MiB": float(record["max_rss"]) if record.get("max_rss", "-") not in ("-", "NA") else None,
            }
        )
    return pd.DataFrame(rows)


def workload_source_text(summary: dict | None) -> str:
    """Where the requests came from, and what was dropped, in one sentence."""
    if not summary:
        return ""
    source = summary["source"]
    if source["kind"] == "synthetic":
        text = f"synthetic prompts, {source['kept']} requests of the {source['preset']} length preset"
    else:
        dropped = source["dropped"]
        text = (
            f"{source['kept']} of the requested {source['requested']} requests sampled (seeded) from "
            f"{source['path']} ({source['format']}, SHA-256 {source['sha256'][:12]}…, "
            f"{source['rows_in_source']} rows): "
            f"{source['rows_examined']} rows tried, {dropped['too_long']} dropped as longer than max_model_len, "
            f"{dropped['too_short']} as under 4 tokens"
        )
        if source["rows_unusable"]:
            text += f", {source['rows_unusable']} conversation(s) without a prompt and a reply skipped"
    if summary["api"] == "chat":
        text += f"; every prompt through the model's chat template (SHA-256 {summary['chat_template_sha256'][:12]}…)"
    else:
        text += "; prompts sent as they are (completions API)"
    return text + "."


def workload_section(workload: list[dict] | None, summary: dict | None = None) -> dict | None:
    if not workload:
        return None
    frame = pd.DataFrame(workload)
    return {
        "source": workload_source_text(summary),
        "count": len(frame),
        "prompt_tokens": frame["prompt_tokens"].describe().to_dict(),
        "max_tokens": frame["max_tokens"].describe().to_dict(),
        "table": frame[["id", "kind", "api", "prompt_tokens", "max_tokens", "prompt"]],
    }


def overview_row(model: str, artifacts: dict) -> dict:
    row = {"model": model}
    comparison = artifacts.get("comparison")
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
        row["server peak output tok/s (level)"] = (
            f"{throughput['mean']:.1f} {interval_text(throughput)} ({level_label(best)})"
        )
    capacity = artifacts.get("slo_capacity")
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
        settings = paging["settings"]
        blocks = f"{settings['max_model_len']}-token blocks vs paged"
        row[f"requests at once on {settings['pool_tokens']:,} slots, {blocks} (vLLM live)"] = (
            f"{contiguous:.0f} vs {paged:.0f}: {paging['live_ratio']:.2f}× (study {paging['study']['ratio']:.1f}×)"
        )
    utilisation = artifacts.get("utilisation")
    if utilisation and utilisation["rows"]:
        top = max(utilisation["rows"], key=lambda r: r["mbu"])
        row["highest memory bandwidth utilisation"] = f"{top['mbu']:.0%} ({top['stage']} {top['case']})"
    return row


def prefix_caching_section(study: dict | None) -> dict | None:
    """Per request set: the hits predicted and measured, and what prefix caching gained."""
    if not study:
        return None
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
    return {
        "table": pd.DataFrame(rows),
        "sets": study["sets"],
        "settings": study["settings"],
        "rounds": len(study["rounds"]),
        "block_size": study["sets"][0]["predicted"]["block_size"],
    }
