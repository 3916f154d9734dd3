"""Section 5: the OpenAI-compatible server under load: its start and the study's request, the
load sweep's table and figures, and how the client was placed. Also the names the report gives
a load level and an interval, used by every section that shows one."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from infbench.core import study_figures
from infbench.report.figures import figure
from infbench.report.tables import fmt


def level_label(level: dict) -> str:
    if level["mode"] == "users":
        return f"{level['max_concurrency']} users"
    if level["mode"] == "session_ramp":
        return f"sessions {level['request_rate']:g}→{level['ramp_end_rate']:g}/s"
    prefix = "chat " if level.get("api") == "chat" else ""
    if level["mode"] == "concurrency":
        return f"{prefix}c={level['max_concurrency']}"
    cap = f", ≤{level['max_concurrency']}" if level["max_concurrency"] else ""
    if level["mode"] == "trace":
        return f"{prefix}trace ×{level['trace_scale']:g} ({level['request_rate']:.2f} req/s){cap}"
    rate = f"{level['request_rate']}" + (f"→{level['ramp_end_rate']}" if level.get("ramp_end_rate") else "")
    return f"{prefix}{rate} req/s{cap}"


def turns_text(turns: int | dict) -> str:
    """sessions.turns: `4 turns`, or `2 to 6 turns (uniform)`."""
    return f"{turns} turns" if isinstance(turns, int) else f"{turns['min']} to {turns['max']} turns (uniform)"


def sessions_text(sessions: dict) -> dict:
    """Users' sessions as the serve and capacity sections describe them: their conversations'
    source, the replies carried and the think time."""
    source = sessions["conversations"]
    return {
        "think": f"{sessions['think_s']:g} s ({sessions['think']})",
        "reply": "the model's own replies" if sessions["reply"] == "model" else "the recorded replies",
        "source": (
            f"{source['conversations']} synthetic conversations of {turns_text(source['turns'])}"
            + (
                f" behind one system prompt of {source['system_prompt_tokens']} tokens"
                if source["system_prompt_tokens"]
                else ""
            )
            if source["kind"] == "synthetic"
            else f"{source['conversations']} conversations ({source['turns']} turns, {source['with_a_system_prompt']} "
            f"with a system prompt) from {source['path']}"
        ),
    }


def interval_text(summary: dict, digits: int = 1) -> str:
    """A 95 % interval as text; a dash where one repeat leaves it undefined."""
    low, high = summary["ci95_low"], summary["ci95_high"]
    if low is None or high is None or low != low or high != high:
        return "–"
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def shown_tail(levels: list[dict]) -> int:
    """The tail percentile the serving table shows beside p90: p99 where some level's pooled
    requests support it, else p95."""
    supported = {q for level in levels for q in level["percentile_support"]["e2el"]["supported"]}
    return 99 if 99 in supported else 95


def counted_sent(level: dict) -> str:
    """Requests counted over requests sent, summed over the level's passes: a windowed pass
    counts those sent in its window, a whole pass every one."""
    repeats = level["repeats"]
    counted = sum(len(r["requests"]) for r in repeats)
    sent = sum(r["window"]["sent"] if r["window"] else len(r["requests"]) for r in repeats)
    return f"{counted} / {sent}"


def level_table(levels: list[dict], tail: int) -> pd.DataFrame:
    rows = []
    for level in levels:
        across = level["across_repeats"]
        support = level["percentile_support"]
        row = {
            "level": level_label(level),
            "passes": len(level["repeats"]),
            "counted / sent": counted_sent(level),
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
        # Open loop: the client's wait for a free slot, left out of latencies timed from the send.
        row["client queue ms (median)"] = level.get("median_client_queue_time_ms")
        row["e2el incl. queue ms (median)"] = level.get("median_e2el_including_client_queue_ms")
        row["goodput req/s"] = level["request_goodput"]
        for metric in ("ttft", "tpot", "e2el"):
            if metric == "e2el":
                row["median e2el ms"] = across["median_e2el_ms"]["mean"]
            for q in (90, tail):
                # A percentile the pooled sample cannot support is left blank, not shown as if it meant something.
                supported = q in support[metric]["supported"]
                row[f"p{q} {metric} ms"] = level[f"p{q}_{metric}_ms"] if supported else None
        row["failed"] = failed_cell(level)
        # The largest client_ceiling value of the level's passes: the share of one core it needed.
        shares = [c["value"] for r in level["repeats"] for c in r["checks"] if c["name"] == "client_ceiling"]
        row["client load %"] = max(shares) * 100
        row["client processes"] = level["client_processes"]
        peak_kv = level["peak_kv_cache_usage_perc"]
        row["peak KV %"] = peak_kv * 100 if peak_kv is not None else None
        rows.append(row)
    table = pd.DataFrame(rows)
    percentiles = [c for c in table.columns if c.startswith(("p90 ", f"p{tail} "))]
    table[percentiles] = table[percentiles].astype(float)
    return table


def failed_cell(level: dict) -> int | str:
    """A level's failed requests with their causes, e.g. "6 (2 HTTP 500, 2 timeout)"; the count
    alone where none failed or the run predates the causes."""
    causes = level.get("failed_by_cause")
    if not causes:
        return level["failed"]
    return f"{level['failed']} ({', '.join(f'{count} {cause}' for cause, count in causes.items())})"


def sweep_figures(levels: list[dict], table: pd.DataFrame, tail: int) -> list:
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

    # A curve needs two loads; with one (the default's c=1) the capacity section's probes are the curve.
    if len(closed) > 1:
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
            "Every counted request of every repeat.",
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
    return figures


def study_request_view(request: dict) -> dict:
    """The study's request as the server answered it: cold, then warm (a median where several)."""
    cold, warm = request["cold"], request["warm_latency_s"]
    return {
        "prompt": request["prompt"],
        "cold_s": fmt(cold["latency_s"], 2),
        "prompt_tokens": cold["prompt_tokens"],
        "completion_tokens": cold["completion_tokens"],
        "text": cold["text"],
        "warm_median_s": fmt(warm["median"], 2) if warm else None,
        "warm_n": warm["n"] if warm else None,
        "warm_s": None if warm else fmt(request["warm"][0]["latency_s"], 2),
    }


def ceiling_view(ceiling: dict) -> dict:
    return {
        "per_request_us": fmt(ceiling["cpu_per_request_s"] * 1e6, 0),
        "per_chunk_us": fmt(ceiling["cpu_per_chunk_s"] * 1e6, 1),
        "chunk_ceiling": fmt(ceiling["chunk_ceiling"], 0),
        "first_byte_ms": fmt(ceiling["first_byte_ms"], 2),
    }


def share_text(parts: dict, key: str) -> str:
    """A part of a mean in ms with its share of the client's mean; blank where the split has no such part."""
    value, whole = parts.get(key), parts["client"]
    if value is None:
        return ""
    return f"{value:.1f} ({value / whole:.0%})" if whole > 0 else f"{value:.1f}"


def breakdown_table(levels: list[dict]) -> pd.DataFrame:
    """Each level's mean TTFT and E2E latency split by vLLM's own timestamps, and the engine's
    TPOT beside the client's (serving.time_breakdown); a level without a split says why."""
    rows = []
    for level in levels:
        split = level.get("time_breakdown")
        if split is None:
            continue
        for latency in ("ttft", "e2el"):
            row = {"level": level_label(level), "mean of": latency.upper(), "requests": split["requests"]}
            parts = split[f"{latency}_ms"]
            if parts is None:
                rows.append({**row, "client ms": "no split: " + split["check"]["detail"]})
                continue
            whole = parts["client"]
            rows.append(
                {
                    **row,
                    "client ms": fmt(whole, 1),
                    "engine queue": share_text(parts, "engine_queue"),
                    "engine prefill": share_text(parts, "engine_prefill"),
                    "engine decode": share_text(parts, "engine_decode"),
                    "API server and intake": share_text(parts, "api_server_and_intake"),
                    "after vLLM's stamps": share_text(parts, "after_vllm"),
                    "TPOT ms client / engine": f"{split['tpot_ms']['client']:.2f} / {split['tpot_ms']['engine']:.2f}"
                    if latency == "e2el" and split["tpot_ms"]
                    else "",
                }
            )
    return pd.DataFrame(rows)


def users_levels_view(load: dict) -> dict | None:
    """load.users' levels read through Little's law, each figure the mean over the level's
    repeats (docs/method.md#sessions), and load.session_ramp's level named; None without either."""
    levels = [level for level in load["levels"] if level["mode"] == "users"]
    ramp = next((level for level in load["levels"] if level["mode"] == "session_ramp"), None)
    if not levels and ramp is None:
        return None

    def implied_range(level):
        implied = [r["sessions"]["users_from_littles_law"] for r in level["repeats"]]
        known = [value for value in implied if value is not None]
        return f"{min(known):.1f} to {max(known):.1f}" if len(known) > 1 else ""

    table = pd.DataFrame(
        {
            "level": level_label(level),
            "turns counted (mean a pass)": fmt(figures["turns"], 0),
            "mean turn": fmt(figures["mean_turn"], 1),
            "mean prompt tokens": fmt(figures["mean_prompt_tokens"], 0),
            "in flight L": fmt(figures["mean_in_flight"], 2),
            "response R s": fmt(figures["mean_response_s"], 2),
            "think Z s (drawn)": f"{fmt(figures['mean_think_s'], 2)} ({fmt(figures['mean_think_drawn_s'], 2)})",
            "users L × (R + Z) / R": fmt(figures["users_from_littles_law"], 1),
            "over the passes": implied_range(level),
            "prefix-cache hits": "" if (hits := figures["prefix_cache_hit_rate"]) is None else f"{hits:.0%}",
        }
        for level in levels
        for figures in [level["sessions"]]
    )
    return {
        **sessions_text(load["sessions"]),
        "table": table,
        "session_ramp": level_label(ramp) if ramp else None,
        "ramp_sessions": load["settings"]["session_ramp"]["sessions"] if ramp else None,
    }


def whole_pass_text(levels: list[dict]) -> str:
    """The levels measured over their whole pass (no window), named by kind: '' if none."""
    kinds = [kind for kind in ("ramp", "trace", "session_ramp") if any(level["mode"] == kind for level in levels)]
    return " and ".join(f"{kind.replace('_', ' ')} levels" for kind in kinds)


def view(server: dict | None, load: dict | None) -> dict | None:
    """What the section shows; None without a server and its load sweep."""
    if not server or not load:
        return None
    levels = load["levels"]
    tail = shown_tail(levels)
    table = level_table(levels, tail)
    endpoint = server["endpoint"]
    placement = load["client_placement"]
    study = study_figures.SERVER
    return {
        "endpoint": {"base_url": endpoint["base_url"], "model": endpoint["model"], "metrics": endpoint["metrics"]}
        if endpoint
        else None,
        "startup_s": None if endpoint else fmt(server["startup_s"], 1),
        "kv_blocks": None if endpoint else server["kv"]["num_blocks"],
        "kv_block_size": None if endpoint else server["kv"]["block_size"],
        "prefix_caching": None if endpoint else server["kv"].get("prefix_caching"),
        "request": study_request_view(server["study_request"]),
        "study": {key: study[key] for key in ("latency_s", "prompt_tokens", "completion_tokens", "method", "hardware")},
        "repeats": len(levels[0]["repeats"]) if levels else 0,
        "window": {"seconds": f"{load['settings']['window_s']:g}", "min_requests": load["settings"]["window_requests"]},
        "whole_pass_levels": whole_pass_text(levels),
        "chat_levels": any(
            level["api"] == "chat" and level["mode"] not in ("users", "session_ramp") for level in levels
        ),
        "users_levels": users_levels_view(load),
        "notes": load["notes"],
        "placement": placement["note"],
        "engine_cpus": ", ".join(str(cpu) for cpu in placement["engine_cpus"]) or "none",
        "client_cpus": ", ".join(str(cpu) for cpu in placement["client_cpus"]),
        "ceiling": ceiling_view(load["client_ceiling"]),
        "table": table,
        "figures": sweep_figures(levels, table, tail),
        "requests_table": load.get("requests_table"),  # runs made before request tables have none
        "breakdown": breakdown_table(levels),
    }
