"""The split of a level's mean TTFT and E2E latency by vLLM's own per-request histograms, worked
by hand on planted scrapes, and refused where vLLM did not time the same requests."""

import pytest

from infbench.core.metrics import RequestResult
from infbench.engines.server_metrics import MetricsSeries, parse_metrics
from infbench.serving.time_breakdown import SERVER_HISTOGRAMS, breakdown, pass_totals, pooled_totals


def scrape(t, **sums_counts):
    """A parsed scrape holding each histogram's (sum, count)."""
    sample = {"t": t}
    for key, (total, count) in sums_counts.items():
        sample[f"{SERVER_HISTOGRAMS[key]}_sum"] = total
        sample[f"{SERVER_HISTOGRAMS[key]}_count"] = count
    return sample


def histograms(t, n, server_ttft, server_e2el, queue, prefill, decode, engine_tpot):
    return scrape(
        t,
        server_ttft=(server_ttft, n),
        server_e2el=(server_e2el, n),
        queue=(queue, n),
        prefill=(prefill, n),
        decode=(decode, n),
        engine_tpot=(engine_tpot, n),
    )


BEFORE = histograms(0.0, 10, 1.0, 5.0, 0.2, 0.3, 3.0, 0.1)
# Two requests: server TTFT 30 and 50 ms, server E2E 130 and 190 ms; queue 5 + 5, prefill
# 10 + 20, decode 80 + 120 ms; engine TPOT 8 + 12 ms.
AFTER = histograms(9.0, 12, 1.08, 5.32, 0.21, 0.33, 3.2, 0.12)
# The client: TTFT 40 and 60 ms, E2E 140 and 200 ms over 11 tokens, so TPOT 10 and 14 ms.
RESULTS = [RequestResult("a", 5, 11, 0.040, 0.140), RequestResult("b", 5, 11, 0.060, 0.200)]


def test_the_split_adds_up_to_the_clients_means_by_hand():
    split = breakdown(pass_totals(MetricsSeries([BEFORE, AFTER]), RESULTS))
    assert split["check"]["status"] == "pass" and split["requests"] == 2
    ttft = split["ttft_ms"]
    assert ttft["client"] == pytest.approx(50.0)
    assert ttft["engine_queue"] == pytest.approx(5.0) and ttft["engine_prefill"] == pytest.approx(15.0)
    assert ttft["api_server_and_intake"] == pytest.approx(40.0 - 20.0)  # server TTFT 40 - engine 20
    assert ttft["after_vllm"] == pytest.approx(50.0 - 40.0)
    e2el = split["e2el_ms"]
    assert e2el["client"] == pytest.approx(170.0) and e2el["engine_decode"] == pytest.approx(100.0)
    assert e2el["api_server_and_intake"] == pytest.approx(160.0 - 120.0)  # server E2E 160 - engine 5 + 15 + 100
    assert e2el["after_vllm"] == pytest.approx(170.0 - 160.0)
    assert split["tpot_ms"] == pytest.approx({"client": 12.0, "engine": 10.0})


def test_tpot_means_leave_out_one_token_outputs_as_the_levels_tpot_does():
    # A third request of one output token: vLLM observes its TPOT as 0, the client has none.
    later = histograms(9.0, 13, 1.1, 5.36, 0.22, 0.34, 3.2, 0.12)
    one_token = RequestResult("c", 5, 1, 0.020, 0.040)
    split = breakdown(pass_totals(MetricsSeries([BEFORE, later]), [*RESULTS, one_token]))
    assert split["requests"] == 3 and split["tpot_ms"] == pytest.approx({"client": 12.0, "engine": 10.0})
    assert split["ttft_ms"]["client"] == pytest.approx((40 + 60 + 20) / 3)


def test_repeats_pool_by_their_sums_not_by_their_means():
    one = pass_totals(MetricsSeries([BEFORE, AFTER]), RESULTS)
    # A second pass of one request: server TTFT 100 ms, E2E 400 ms, engine TPOT 20 ms.
    later = histograms(20.0, 13, 1.18, 5.72, 0.21, 0.41, 3.4, 0.14)
    two = pass_totals(MetricsSeries([AFTER, later]), [RequestResult("c", 5, 11, 0.120, 0.420)])
    split = breakdown(pooled_totals([one, two]))
    assert split["requests"] == 3
    assert split["ttft_ms"]["client"] == pytest.approx((40 + 60 + 120) / 3)
    assert split["ttft_ms"]["after_vllm"] == pytest.approx((40 + 60 + 120) / 3 - (30 + 50 + 100) / 3)
    assert split["e2el_ms"]["after_vllm"] == pytest.approx((140 + 200 + 420) / 3 - (130 + 190 + 400) / 3)
    assert split["tpot_ms"]["engine"] == pytest.approx((8 + 12 + 20) / 3)
    assert pooled_totals([one, None]) is None


def test_no_split_where_vllm_timed_other_requests_than_the_client():
    # A third request reached the server (another client, or one the client counted as failed).
    extra = {**AFTER, **scrape(9.0, server_ttft=(1.1, 13))}
    split = breakdown(pass_totals(MetricsSeries([BEFORE, extra]), RESULTS))
    assert split["check"]["status"] == "warn" and "server_ttft 3" in split["check"]["detail"]
    assert split["ttft_ms"] is None and split["e2el_ms"] is None and split["tpot_ms"] is None
    failed = [RESULTS[0], RequestResult("b", 5, 0, 0.0, 0.0, success=False)]
    assert breakdown(pass_totals(MetricsSeries([BEFORE, AFTER]), failed))["check"]["status"] == "warn"


def test_a_server_without_the_histograms_or_metrics_has_no_split():
    assert pass_totals(MetricsSeries([{"t": 0.0}, {"t": 1.0}]), RESULTS) is None
    assert pass_totals(MetricsSeries([], available=False), RESULTS) is None
    assert breakdown(None) is None


def test_the_histograms_sum_and_count_are_parsed_over_their_labels():
    text = "\n".join(
        [
            "# TYPE vllm:request_queue_time_seconds histogram",
            'vllm:request_queue_time_seconds_bucket{engine="0",le="0.3"} 2.0',
            'vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf"} 3.0',
            'vllm:request_queue_time_seconds_count{engine="0"} 3.0',
            'vllm:request_queue_time_seconds_sum{engine="0"} 0.5',
            'vllm:request_queue_time_seconds_count{engine="1"} 1.0',
            'vllm:request_queue_time_seconds_sum{engine="1"} 0.25',
        ]
    )
    values = parse_metrics(text + "\n")
    assert values == {"vllm:request_queue_time_seconds_count": 4.0, "vllm:request_queue_time_seconds_sum": 0.75}
