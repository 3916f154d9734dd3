"""Where a level's time goes: the mean TTFT and E2E latency our client measured, split by the
intervals vLLM's server timed for the same requests (its per-request histograms' sum and count
deltas between a pass's first and last /metrics scrape), taken only where all six counts equal
the client's completions; TPOT is shown beside the engine's, not split.
See docs/method.md#time-breakdown."""

from __future__ import annotations

from infbench.core.checks import check
from infbench.core.metrics import MS, RequestResult
from infbench.engines.server_metrics import MetricsSeries

# The breakdown's names for vLLM's histograms (server_metrics.HISTOGRAMS keeps their sum and count).
SERVER_HISTOGRAMS = {
    "server_ttft": "vllm:time_to_first_token_seconds",
    "server_e2el": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
    "engine_tpot": "vllm:request_time_per_output_token_seconds",
}
CLIENT_SUMS = ("ttft_sum_s", "e2el_sum_s", "tpot_sum_s")
CLIENT_COUNTS = ("requests", "multi_token_requests")


def pass_totals(series: MetricsSeries, results: list[RequestResult]) -> dict | None:
    """The sums and counts one pass contributes: each histogram's deltas between the pass's
    first and last scrape, and the client's TTFT, E2E and TPOT sums over its successful
    requests (TPOT over those of more than one output token). None without /metrics, or where
    the server publishes none of these histograms (an endpoint that is not vLLM)."""
    names = {key for sample in series.samples for key in sample}
    if not series.available or any(f"{name}_count" not in names for name in SERVER_HISTOGRAMS.values()):
        return None
    server = {}
    for key, name in SERVER_HISTOGRAMS.items():
        first_sum, last_sum = series.first_last(f"{name}_sum")
        first_count, last_count = series.first_last(f"{name}_count")
        server[key] = {"sum_s": last_sum - first_sum, "count": round(last_count - first_count)}
    done = [r for r in results if r.success]
    return {
        "server": server,
        "client": {
            "requests": len(done),
            "multi_token_requests": sum(r.tpot is not None for r in done),
            "ttft_sum_s": sum(r.ttft for r in done),
            "e2el_sum_s": sum(r.e2el for r in done),
            "tpot_sum_s": sum(r.tpot for r in done if r.tpot is not None),
        },
    }


def pooled_totals(totals: list[dict | None]) -> dict | None:
    """Several passes' totals added (a level over its repeats); None if any pass has none."""
    if not totals or any(t is None for t in totals):
        return None
    return {
        "server": {
            key: {
                "sum_s": sum(t["server"][key]["sum_s"] for t in totals),
                "count": sum(t["server"][key]["count"] for t in totals),
            }
            for key in SERVER_HISTOGRAMS
        },
        "client": {key: sum(t["client"][key] for t in totals) for key in (*CLIENT_COUNTS, *CLIENT_SUMS)},
    }


def breakdown(totals: dict | None) -> dict | None:
    """The split of the mean TTFT and E2E latency, and the engine's TPOT beside the client's
    (module docstring), from pass or pooled totals, with the check that vLLM timed the same
    requests the client did; None without /metrics."""
    if totals is None:
        return None
    server, client = totals["server"], totals["client"]
    counted = {key: one["count"] for key, one in server.items()}
    same = client["requests"] > 0 and all(count == client["requests"] for count in counted.values())
    detail = (
        f"vLLM timed {', '.join(f'{key} {n}' for key, n in counted.items())} requests for the "
        f"{client['requests']} the client completed"
    )
    record = {
        "requests": client["requests"],
        "server_counts": counted,
        "check": check(
            "breakdown_same_requests",
            "pass" if same else "warn",
            same,
            detail
            + (
                ""
                if same
                else ": not the same requests (a failure, other traffic on the server, or a /metrics scrape that "
                "failed), no split"
            ),
        ),
        "ttft_ms": None,
        "e2el_ms": None,
        "tpot_ms": None,
    }
    if not same:
        return record
    n, multi = client["requests"], client["multi_token_requests"]
    mean = {key: one["sum_s"] / n * MS for key, one in server.items()}
    ours = {key.removesuffix("_sum_s"): client[key] / n * MS for key in ("ttft_sum_s", "e2el_sum_s")}
    engine_ttft = mean["queue"] + mean["prefill"]
    engine_e2el = engine_ttft + mean["decode"]
    record["ttft_ms"] = {
        "client": ours["ttft"],
        "engine_queue": mean["queue"],
        "engine_prefill": mean["prefill"],
        "api_server_and_intake": mean["server_ttft"] - engine_ttft,
        "after_vllm": ours["ttft"] - mean["server_ttft"],
    }
    record["e2el_ms"] = {
        "client": ours["e2el"],
        "engine_queue": mean["queue"],
        "engine_prefill": mean["prefill"],
        "engine_decode": mean["decode"],
        "api_server_and_intake": mean["server_e2el"] - engine_e2el,
        "after_vllm": ours["e2el"] - mean["server_e2el"],
    }
    record["tpot_ms"] = (
        {
            "client": client["tpot_sum_s"] / multi * MS,
            "engine": server["engine_tpot"]["sum_s"] / multi * MS,
        }
        if multi
        else None
    )
    return record
