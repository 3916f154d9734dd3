"""Where an open-loop request's time goes before the server sees it: the client's lag behind its
own schedule, and its wait for a free slot under max_concurrency (vLLM's client_queue_time),
each reported apart from latencies timed from the send."""

import asyncio

import pytest
from timing import SchedulingJitter

from infbench.core.metrics import RequestResult
from infbench.engines.server_metrics import MetricsSeries
from infbench.serving.arrivals import Arrivals
from infbench.serving.client import LevelRun, LoadRequest, StreamedResult, run_level
from infbench.serving.level_checks import (
    QUEUE_SHARE_WARN,
    SEND_LAG_WARN_S,
    open_loop_timing,
    validity_checks,
)
from infbench.serving.reference_server import ReferenceServer, Schedule
from infbench.serving.sweep import queue_figures, request_records


def planted_run(scheduled, ready_late, queued, e2el=0.2):
    """An open-loop pass of requests scheduled at `scheduled` offsets, each reaching its send
    `ready_late` s late and waiting `queued` s for a slot, from a level start at t = 100."""
    results = []
    for index, (when, late, queue) in enumerate(zip(scheduled, ready_late, queued)):
        ready = 100.0 + when + late
        result = RequestResult(f"r#{index}", 10, 4, 0.05, e2el, [0.05] * 3)
        results.append(
            StreamedResult(result, "abcd", sent_at=ready + queue, ready_at=ready, scheduled_s=when, max_tokens=4)
        )
    return LevelRun(results, 2.0, MetricsSeries(available=False), 0.01, list(scheduled), 100.0)


def check_of(run, name):
    return next(c for c in validity_checks(run, None, False) if c["name"] == name)


def test_send_lag_and_client_queue_are_measured_apart():
    on_time = planted_run([0.0, 0.5, 1.0, 1.5], [0.001, 0.002, 0.001, 0.003], [0.0, 0.0, 0.0, 0.0])
    timing = open_loop_timing(on_time)
    assert timing["send_lag_s"] == pytest.approx([0.001, 0.002, 0.001, 0.003])
    assert timing["client_queue_s"] == pytest.approx([0.0] * 4)
    assert check_of(on_time, "send_lag")["status"] == "pass"
    assert check_of(on_time, "client_queue")["status"] == "pass"
    # The client reached one send 80 ms late: lag, not queueing.
    late = planted_run([0.0, 0.5, 1.0, 1.5], [0.001, SEND_LAG_WARN_S + 0.03, 0.001, 0.001], [0.0] * 4)
    assert check_of(late, "send_lag")["status"] == "warn"
    assert check_of(late, "client_queue")["status"] == "pass"
    # Requests waited 50-150 ms for a slot against E2E latencies of 200 ms: queueing, not lag.
    queued = planted_run([0.0, 0.05, 0.1, 0.15], [0.001] * 4, [0.0, 0.05, 0.1, 0.15])
    assert check_of(queued, "send_lag")["status"] == "pass"
    queue = check_of(queued, "client_queue")
    assert queue["status"] == "warn" and queue["value"] == pytest.approx(0.075 / 0.2)
    assert queue["value"] > QUEUE_SHARE_WARN
    figures = queue_figures(request_records(queued))
    assert figures["median_client_queue_time_ms"] == pytest.approx(75.0)
    assert figures["median_e2el_including_client_queue_ms"] == pytest.approx(275.0)
    records = request_records(queued)
    assert [r["client_queue_s"] for r in records] == pytest.approx([0.0, 0.05, 0.1, 0.15])
    assert [r["scheduled_s"] for r in records] == [0.0, 0.05, 0.1, 0.15]
    assert queue_figures(records + records)["median_client_queue_time_ms"] == pytest.approx(75.0)


def test_a_closed_loop_has_no_schedule_to_lag_or_queue_behind():
    closed = planted_run([0.0] * 2, [0.0] * 2, [0.0] * 2)
    closed.scheduled = []
    for streamed in closed.results:  # a closed loop's requests carry no schedule
        streamed.ready_at = streamed.scheduled_s = None
    assert open_loop_timing(closed) is None and queue_figures(request_records(closed)) == {} and queue_figures([]) == {}
    assert "client_queue_s" not in request_records(closed)[0]


def test_sessions_on_a_ramp_that_started_late_warn_their_send_lag():
    """A session ramp's pass (LevelRun.session_start_lags: each session's first turn's lag)."""
    on_time = planted_run([0.0] * 2, [0.0] * 2, [0.0] * 2)
    on_time.scheduled = []
    on_time.session_start_lags = [0.001, 0.02]
    assert check_of(on_time, "send_lag")["status"] == "pass"
    late = planted_run([0.0] * 2, [0.0] * 2, [0.0] * 2)
    late.scheduled = []
    late.session_start_lags = [0.001, SEND_LAG_WARN_S + 0.03]
    lag = check_of(late, "send_lag")
    assert lag["status"] == "warn" and lag["value"] == pytest.approx(0.08) and "sessions started" in lag["detail"]


# The client's own work between a request's time coming and its send, idle: building the body
# (tens of microseconds measured; 1 ms allowed).
SEND_COST_S = 0.001


@pytest.mark.slow  # about 3 s of real time on the reference server: the fast group stays under a minute
def test_a_capped_rate_above_the_servers_pace_queues_in_the_client(tmp_path):
    """The reference server takes 20 + 9 x 10 = 110 ms a request: at 20 req/s with one request
    in flight, requests wait in the client, and latencies from the send stay near 110 ms while
    those from the schedule grow; uncapped at the same rate nothing waits: no request's send
    comes later after its time than the client's own cost and one wait for a CPU, measured
    alongside (a preemption between the two is the only way it could; 0.03 ms measured, idle
    and with three busy loops on 2 cores)."""
    requests = [LoadRequest(f"r#{i}", "hello", 1, 10) for i in range(12)]
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=10)) as server:

        def level(rate, cap):
            return asyncio.run(
                run_level(
                    server.base_url,
                    "m",
                    requests,
                    concurrency=cap,
                    arrivals=Arrivals(rate, 1.0),
                    seed=0,
                    interval_s=1.0,
                    timeout_s=30,
                )
            )

        capped = level(20.0, 1)
        with SchedulingJitter() as jitter:
            free = level(20.0, None)
    figures = queue_figures(request_records(capped))
    assert figures["median_client_queue_time_ms"] > 100
    median_e2el_ms = sorted(s.result.e2el for s in capped.results)[6] * 1000
    assert figures["median_e2el_including_client_queue_ms"] > 2 * median_e2el_ms > 0
    assert check_of(capped, "client_queue")["status"] == "warn"
    waited = [r["client_queue_s"] for r in request_records(free)]
    assert max(waited) < jitter.allowance(SEND_COST_S, wakes=1), (waited, jitter)
    assert check_of(free, "client_queue")["status"] == "pass"
    assert check_of(free, "send_lag")["status"] == "pass"
