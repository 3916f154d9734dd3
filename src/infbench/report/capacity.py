"""Section 6: how many users within the SLO: the capacity searches with their probes, the binding
limit and the cost at capacity. Also how the report names a capacity, a load and a probe."""

from __future__ import annotations

import pandas as pd

from infbench.core.capacity_terms import (
    LAG_GROWTH_BEHIND,
    OUTCOME_FIXES,
    SEARCHES,
    capacity_text,
    load_text,
    rerun_text,
    rule_text,
    undecided_bound,
)
from infbench.report.figures import figure
from infbench.report.serve import sessions_text
from infbench.report.tables import fmt

LIMITS = {
    "kv_memory": "KV memory (requests waited for blocks or were preempted)",
    "max_num_seqs": "the engine's max_num_seqs",
    "scheduler": "the scheduler's token budget (requests waited with KV memory free)",
    "compute": "compute (latency rose with KV memory free, nothing waited)",
    "client": "the client (it fell behind its schedule, used most of a core or stalled: the server was not measured)",
    "unknown": "unknown (the endpoint publishes no /metrics)",
}


def estimate_text(mode: str, estimate: dict | None) -> str:
    """The fitted capacity with its interval, e.g. `c=44 [95 % CI c=38 to c=51]`; an end
    outside the probed range as `below c=8` or `above c=64`; where every probe met (or none
    did), no interval, only the bound."""
    if not estimate or estimate["value"] is None:
        return "none"

    def end(value):
        if value == "below":
            return f"below {load_text(mode, estimate['lowest_probe'])}"
        if value == "above":
            return f"above {load_text(mode, estimate['highest_probe'])}"
        return load_text(mode, value)

    low, high = estimate["ci95"]
    if estimate["value"] == "above":
        bound = "" if low == "above" else f"; 95 % CI from {end(low)}"
        return f"at least {load_text(mode, estimate['highest_probe'])} (the fit meets the target at every probe{bound})"
    if estimate["value"] == "below":
        bound = "" if high == "below" else f"; 95 % CI up to {end(high)}"
        return f"below {load_text(mode, estimate['lowest_probe'])} (no probe met: no crossing to fit{bound})"
    return f"{end(estimate['value'])} [95 % CI {end(low)} to {end(high)}]"


def probe_text(mode: str, probe: dict | None) -> str:
    """A probe as `c=8: 94 % [83, 98] within the SLO`."""
    if probe is None:
        return "none"
    low, high = probe["attainment_ci95"]
    return (
        f"{load_text(mode, probe['load'])}: {probe['attainment'] * 100:.0f} % "
        f"[{low * 100:.0f}, {high * 100:.0f}] within the SLO"
    )


def search_rows(capacity: dict) -> list[dict]:
    rows = []
    for mode, name in SEARCHES.items():
        search = capacity.get(mode)
        if not search:
            continue
        probes = {p["load"]: p for p in search["probes"]}
        served = search["at_capacity"]
        throughput = served["output_throughput"] if served else None
        rows.append(
            {
                "search": name,
                "SLO capacity": capacity_text(mode, search),
                # An undecided end: the bound, not an interval the probes cannot back.
                "fitted capacity": undecided_bound(mode, search) or estimate_text(mode, search.get("estimate")),
                "a rerun's fitted capacity": rerun_text(mode, capacity),
                "last passing probe": probe_text(mode, probes.get(search["capacity"])),
                "first failing probe": probe_text(mode, probes.get(search["first_failing"])),
                "output tok/s at capacity": f"{throughput['mean']:.1f}" if throughput else "",
                "probes": len(search["probes"]),
                "search s": f"{search['search_s']:.0f} of {search['max_search_s']:g}",
                "converged": "yes" if search["converged"] else f"no: {OUTCOME_FIXES[search['outcome']]}",
                "binding limit": LIMITS[search["binding"]["limit"]],
            }
        )
    return rows


def settled_early(probe: dict) -> bool:
    """A pass of the probe closed its window before its request count: the probe was missed."""
    return any(p.get("settled_early") for p in probe["pass_records"])


def settled_early_note(capacity: dict) -> str | None:
    """Which probes' windows ended early, in this run's words; None where none did."""
    loads = [
        load_text(mode, probe["load"])
        for mode in SEARCHES
        for probe in (capacity.get(mode) or {}).get("probes", [])
        if settled_early(probe)
    ]
    return f"in this run: {', '.join(loads)}" if loads else None


def out_of_time_note(capacity: dict) -> str | None:
    """Which searches the time budget stopped, in this run's words; None where none."""
    searches = [(f"the {mode.replace('_', ' ')} search", capacity[mode]) for mode in SEARCHES if capacity.get(mode)]
    stopped = [
        f"{name} after {search['search_s']:.0f} s" for name, search in searches if search["outcome"] == "out_of_time"
    ]
    return f"in this run: {', '.join(stopped)}" if stopped else None


def probe_table(capacity: dict) -> pd.DataFrame:
    rows = []
    for mode in SEARCHES:
        for probe in (capacity.get(mode) or {}).get("probes", []):
            low, high = probe["attainment_ci95"]
            rows.append(
                {
                    "probe": load_text(mode, probe["load"]),
                    "decision": (
                        "not the server's (the client was the limit)"
                        if probe["client_limited"]
                        else "undecided (too few requests to be met: steered as missed)"
                        if probe.get("too_few_to_meet")
                        else probe["decision"]
                        if probe["decision"] != "undecided"
                        else f"undecided ({'met' if probe['met'] else 'missed'} by its point estimate)"
                    )
                    + (", the request pool ran out (raise workload.pool_requests)" if probe["supply_exhausted"] else "")
                    + (", its window ended once missed" if settled_early(probe) else "")
                    + (", capacity.max_search_s ran out" if probe["out_of_time"] else "")
                    + (
                        f", {len(probe['stalled_passes'])} window(s) measured again: the client stalled"
                        if probe.get("stalled_passes")
                        else ""
                    ),
                    "within SLO %": 100 * probe["attainment"],
                    "ci95": f"[{low * 100:.0f}, {high * 100:.0f}]",
                    "counted / sent": f"{probe['requests']} / {probe['sent']}",
                    "windows": probe["passes"],
                    "window s": probe["window"]["seconds"],
                    "output tok/s": probe["output_throughput"]["mean"],
                    "p99 TTFT ms": probe["p99_ttft_ms"],
                    "p99 TPOT ms": probe["p99_tpot_ms"],
                    "peak running (windows)": probe["peak_num_requests_running"],
                    "peak waiting (windows)": probe["peak_num_requests_waiting"],
                    "preemptions": probe["preemptions"],
                    "saturated": "yes" if probe["saturated"] else "",
                    "mean in flight (users)": probe["sessions"]["mean_in_flight"] if "sessions" in probe else None,
                }
            )
    return pd.DataFrame(rows)


def slo_figure(capacity: dict):
    """Every probe's latency at the target percentile over its SLO, against its throughput; None
    where no probe has one."""
    slo = capacity["slo_ms"]
    target = capacity["attainment_target"]
    points = []
    for mode in SEARCHES:
        for probe in (capacity.get(mode) or {}).get("probes", []):
            for metric, limit in slo.items():
                value = probe["at_target_percentile_ms"][metric]
                if value is not None:
                    points.append(
                        {
                            "search": mode.replace("_", " "),
                            "latency": f"p{100 * target:g} {metric.upper()}",
                            "load": probe["load"],
                            "output tok/s": probe["output_throughput"]["mean"],
                            "latency / SLO": value / limit,
                            "met": probe["met"],
                        }
                    )
    frame = pd.DataFrame(points)
    if frame.empty:
        return None

    def draw(ax):
        markers = {"concurrency": "o", "request rate": "s", "users": "^", "session rate": "v"}
        for (search, latency), group in frame.groupby(["search", "latency"]):
            group = group.sort_values("load")
            label = f"{latency}, {search}"
            ax.plot(group["output tok/s"], group["latency / SLO"], marker=markers[search], label=label)
        ax.axhline(1.0, color="#d9534f", lw=1.2, ls="--")
        ax.text(ax.get_xlim()[0], 1.02, " SLO", color="#d9534f", fontsize=8, va="bottom")
        ax.set_yscale("log")
        ax.set_xlabel("output tokens per second (mean over a probe's passes)")
        ax.set_ylabel(f"p{100 * target:g} latency / its SLO")
        ax.legend(fontsize=7, frameon=False)

    return figure(
        "Throughput against latency, every probe, with the SLO",
        draw,
        frame,
        f"Each point a probe, joined in order of load. A probe passes when at least {100 * target:g} % of its "
        f"requests completed within every SLO at once (and it was not saturated); for one SLO alone that is "
        f"near, not exactly, its p{100 * target:g} (interpolated, over completed requests) under the dashed line.",
    )


def attainment_figure(capacity: dict, mode: str):
    """One search's probes: attainment with its 95 % interval against load, the fitted curve
    the capacity is read from, and the target; None where the search did not run."""
    search = capacity.get(mode)
    if not search:
        return None
    target = capacity["attainment_target"]
    fitted = {point["load"]: point["fitted"] for point in search["estimate"]["curve"]}
    frame = pd.DataFrame(
        [
            {
                "load": probe["load"],
                "attainment": probe["attainment"],
                "ci95_low": probe["attainment_ci95"][0],
                "ci95_high": probe["attainment_ci95"][1],
                "fitted": fitted.get(probe["load"]),
                "decision": probe["decision"],
            }
            for probe in search["probes"]
        ]
    ).sort_values("load")

    def draw(ax):
        colours = {"met": "#2a7ab0", "missed": "#d9534f", "undecided": "#999999"}
        for decision, part in frame.groupby("decision"):
            ax.errorbar(
                part["load"],
                part["attainment"],
                yerr=[part["attainment"] - part["ci95_low"], part["ci95_high"] - part["attainment"]],
                fmt="o",
                color=colours[decision],
                capsize=3,
                label=decision,
            )
        ax.plot(frame["load"], frame["fitted"], color="#555555", lw=1, label="non-increasing fit")
        ax.axhline(target, color="#d9534f", lw=1.2, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(
            {
                "concurrency": "requests in flight",
                "users": "users in chat sessions",
                "session_rate": "new chat sessions a second",
            }.get(mode, "request rate, req/s")
        )
        ax.set_ylabel("attainment")
        ax.legend(fontsize=7, frameon=False)

    name = SEARCHES[mode]
    return figure(
        f"Attainment against load ({name}), every probe, with the target",
        draw,
        frame,
        f"Each point a probe: the share of its counted requests that met every SLO, with its 95 % Wilson "
        f"interval; blue met, red missed (by the decision rule above, or the server saturated: its "
        f"queue grew), grey undecided (the fit leaves out those too few to be met and any whose client was the "
        f"limit). "
        f"The line is the non-increasing fit the capacity and its interval are read from; the dashed line is "
        f"the target, {100 * target:g} %.",
    )


def view(capacity: dict | None) -> dict | None:
    """What the section shows; None where the capacity search did not run."""
    if not capacity:
        return None
    target = int(round(capacity["attainment_target"] * 100, 0))
    predicted = capacity["predicted_kv_concurrency"]
    binding = capacity["concurrency"]["binding"]
    kv_limit = capacity["concurrency"]["kv_limit"]
    cost = capacity["cost"]
    endpoint = capacity["endpoint"]
    figures = [
        f
        for f in (
            attainment_figure(capacity, "concurrency"),
            attainment_figure(capacity, "request_rate"),
            attainment_figure(capacity, "users"),
            attainment_figure(capacity, "session_rate"),
            slo_figure(capacity),
        )
        if f is not None
    ]
    window = capacity["settings"]
    return {
        "target": target,
        "rule": rule_text(capacity.get("decision_rule"), capacity["attainment_target"]),
        "slo": [(metric.upper(), limit) for metric, limit in capacity["slo_ms"].items()],
        "predicted": {
            "value": predicted["value"],
            "usable_blocks": predicted["usable_blocks"],
            "block_size": predicted["block_size"],
        }
        if predicted
        else None,
        "endpoint": endpoint["base_url"] if endpoint else None,
        "start": capacity["concurrency"].get("start"),  # absent from artifacts written before the pilot
        "measured_kv_limit": {**kv_limit, "measured": fmt(kv_limit["measured"], 0)} if kv_limit else None,
        "binding_limit": binding["limit"].replace("_", " "),
        "requests_table": capacity.get("requests_table"),  # runs made before request tables have none
        "binding_at": int(binding["at"]),
        "binding_evidence": binding["evidence"],
        "max_num_seqs": capacity.get("max_num_seqs"),
        "cost": {
            "per_hour": cost["per_hour"],
            "currency": cost["currency"],
            "per_million": fmt(cost["per_million_output_tokens"], 2),
        }
        if cost["per_million_output_tokens"] is not None
        else None,
        "rate_searched": "request_rate" in capacity,
        "behind_share": f"{LAG_GROWTH_BEHIND:.0%}",
        "trace_rate": fmt(capacity["request_rate"].get("trace_rate"), 2)
        if capacity.get("request_rate", {}).get("trace_rate")
        else None,
        "summary": pd.DataFrame(search_rows(capacity)),
        "figures": figures,
        "window": {
            "seconds": window["window_s"],
            "requests": window["window_requests"],
            "repeats": window["repeats"],
            "max_search_s": window["max_search_s"],
        },
        "out_of_time": out_of_time_note(capacity),
        "settled_early": settled_early_note(capacity),
        "rate_window_s": fmt(capacity["request_rate"]["probes"][0]["window"]["seconds"], 1)
        if capacity.get("request_rate")
        else None,
        "estimate_method": capacity["concurrency"]["estimate"]["method"],
        "runs": [
            {
                "run": run["run"],
                "headline": run["headline"],
                "capacity": load_text("concurrency", run["concurrency"]["capacity"]),
                "outcome": run["concurrency"]["outcome"].replace("_", " "),
                "fitted": estimate_text("concurrency", run["concurrency"]["estimate"]),
            }
            for run in capacity.get("runs", [])
        ],
        "failed_runs": capacity.get("failed_runs", []),
        "rerun_method": next(iter(capacity.get("rerun_interval", {}).values()), {}).get("method"),
        "probes": probe_table(capacity),
        "users": users_view(capacity),
        "users_by_turn": users_by_turn(capacity),
    }


def users_view(capacity: dict) -> dict | None:
    """The users search in Little's law's terms (docs/method.md#sessions); None where it did not run."""
    users, sessions = capacity.get("users"), capacity.get("sessions")
    if not users:
        return None
    predicted = users["predicted_from_concurrency"]
    at = (users["at_capacity"] or {}).get("sessions")
    return {
        "capacity": capacity_text("users", users),
        **sessions_text(sessions),
        "predicted": predicted["value"],
        "predicted_from": f"c={predicted['in_flight']}, R {predicted['response_s']:.2f} s"
        if predicted["in_flight"] is not None
        else None,
        "at": {
            "users": at["users"],
            "in_flight": fmt(at["mean_in_flight"], 1),
            "response_s": fmt(at["mean_response_s"], 2),
            "think_s": fmt(at["mean_think_s"], 2),
            "implied": fmt(at["users_from_littles_law"], 1),
            "mean_turn": fmt(at.get("mean_turn"), 1),
            "mean_prompt_tokens": fmt(at.get("mean_prompt_tokens"), 0),
            "hit_rate": None if at["prefix_cache_hit_rate"] is None else f"{at['prefix_cache_hit_rate']:.0%}",
        }
        if at
        else None,
        "prefix_caching": {True: "on", False: "off", None: "the endpoint's own"}[sessions["prefix_caching"]],
        "session_rate": capacity_text("session_rate", capacity["session_rate"])
        if capacity.get("session_rate")
        else None,
        "kv": {
            "in_flight": users["predicted_kv"]["in_flight"],
            "blocks": fmt(users["predicted_kv"]["mean_blocks_per_turn"], 1),
            "users": fmt(users["predicted_kv"]["users"], 0),
        }
        if users.get("predicted_kv")
        else None,
    }


def users_by_turn(capacity: dict) -> pd.DataFrame:
    """The users capacity's probe, its counted turns by place in the conversation (empty: none)."""
    at = (capacity.get("users") or {}).get("at_capacity") or {}
    return pd.DataFrame(
        {
            "turn": row["turn"],
            "turns counted": row["turns"],
            "within SLO": f"{row['met_slo'] / row['turns']:.0%}",
            "mean prompt tokens": fmt(row["mean_prompt_tokens"], 0),
            "median TTFT ms": fmt(row["median_ttft_ms"], 0),
            "median TPOT ms": fmt(row["median_tpot_ms"], 1),
        }
        for row in at.get("by_turn", [])
    )
