"""Where a level's time goes: the mean TTFT and E2E latency our client measured, split by vLLM's
own timestamps for the same requests, at the same moment and the same concurrency.

vLLM's server publishes, per request, histograms of intervals it times itself (0.32 names; the
pass's first and last /metrics scrape bound it, so their sum and count deltas are exactly the
pass's requests):

    server TTFT    the API server: the request's arrival (stamped before its prompt is rendered
                   and tokenized) to its first token back from the engine
    server E2E     the API server: its arrival to its last token back
    queue          the engine core: queued to first scheduled
    prefill        the engine core: first scheduled to first token
    decode         the engine core: first token to last token
    engine TPOT    the engine core: decode / (output tokens - 1), 0 for one token

Each interval lies inside the one around it (the engine core's inside the API server's, the
API server's inside the client's), so the split of a mean (each term a mean over the pass's
requests) has no negative part but for clock noise:

    TTFT   engine queue + engine prefill
           + API server          = server TTFT - (queue + prefill)    rendering, tokenizing,
                                                                       the hops to and from
                                                                       the engine core
           + HTTP and the client = client TTFT - server TTFT          the request's HTTP parsing
                                                                       before its arrival stamp,
                                                                       the chunk's way out, the
                                                                       network, our client
    E2E    engine queue + prefill + decode
           + API server          = server E2E - (queue + prefill + decode)
           + HTTP and the client = client E2E - server E2E

TPOT is shown beside the engine's, not split: (E2E - TTFT) / (n - 1) spans from the first token
to the last, and where the first token reaches the client later than the engine made it (a
client busy elsewhere, a first chunk held up) that span is shorter for the client than for
the engine, so the difference may be negative; the delay is then in TTFT.

Means, not medians: a histogram keeps only the sum and count of what it timed. The split is of
the same requests only where vLLM counted as many requests as the client completed; a pass
where it did not (a failure, another client on the server) gets no split and a warn.

vLLM offline (the engine alone in another process) is not used for this: it cannot run the same
requests at the same moment under the same scheduling, and these timestamps are the engine's
own for exactly the requests the client timed."""

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


def pass_totals(series: MetricsSeries, results: list[RequestResult]) -> dict | None:
    """The sums and counts one pass contributes: each histogram's deltas between the pass's
    first and last scrape, and the client's TTFT, E2E and TPOT sums over its successful
    requests (TPOT 0 for a one-token output, as vLLM observes it). None without /metrics, or
    where the server publishes none of these histograms (an endpoint that is not vLLM)."""
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
            "ttft_sum_s": sum(r.ttft for r in done),
            "e2el_sum_s": sum(r.e2el for r in done),
            "tpot_sum_s": sum(r.tpot or 0.0 for r in done),
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
        "client": {key: sum(t["client"][key] for t in totals) for key in ("requests", *CLIENT_SUMS)},
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
            detail + ("" if same else ": not the same requests (a failure, or other traffic on the server), no split"),
        ),
        "ttft_ms": None,
        "e2el_ms": None,
        "tpot_ms": None,
    }
    if not same:
        return record
    n = client["requests"]
    mean = {key: one["sum_s"] / n * MS for key, one in server.items()}
    ours = {key.removesuffix("_sum_s"): client[key] / n * MS for key in CLIENT_SUMS}
    engine_ttft = mean["queue"] + mean["prefill"]
    engine_e2el = engine_ttft + mean["decode"]
    record["ttft_ms"] = {
        "client": ours["ttft"],
        "engine_queue": mean["queue"],
        "engine_prefill": mean["prefill"],
        "api_server": mean["server_ttft"] - engine_ttft,
        "http_and_client": ours["ttft"] - mean["server_ttft"],
    }
    record["e2el_ms"] = {
        "client": ours["e2el"],
        "engine_queue": mean["queue"],
        "engine_prefill": mean["prefill"],
        "engine_decode": mean["decode"],
        "api_server": mean["server_e2el"] - engine_e2el,
        "http_and_client": ours["e2el"] - mean["server_e2el"],
    }
    record["tpot_ms"] = {"client": ours["tpot"], "engine": mean["engine_tpot"]}
    return record
