"""A level spread over several client processes: the requests dealt round-robin, the cap on
requests in flight split so that the level never exceeds it, every send at its scheduled
time on the one clock, the results back in request order, no worker outliving the level; and
load.client_processes auto choosing more than one only where the calibration says one would
be the limit. On the reference server, whose timing is known."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
from timing import SchedulingJitter

from infbench.serving import client_processes
from infbench.serving.arrivals import Arrivals
from infbench.serving.client import LoadRequest, run_level, split_level
from infbench.serving.client_cost import ClientCost
from infbench.serving.level_checks import processes_needed
from infbench.serving.reference_server import ReferenceServer, Schedule
from infbench.serving.sweep import Level, expected_client_share

REQUESTS = [LoadRequest(f"r{i}#0", "hello world", 2, 8) for i in range(24)]


def test_requests_are_dealt_in_proportion_to_the_split_cap():
    """c = 5 over 3 processes: caps 2, 2, 1, and requests dealt by slot (slots 0-1 to the
    first, 2-3 to the second, 4 to the third), so that no process runs out of requests while
    another still has a queue."""
    shares = split_level(REQUESTS[:7], [0.1 * i for i in range(7)], 5, 3)
    assert [share.indices for share in shares] == [[0, 1, 5, 6], [2, 3], [4]]
    assert [[r.id for r in share.requests] for share in shares][1] == ["r2#0", "r3#0"]
    assert shares[1].scheduled == pytest.approx([0.2, 0.3])
    assert [share.concurrency for share in shares] == [2, 2, 1]
    assert [len(share.requests) for share in split_level(REQUESTS, [], 4, 3)] == [12, 6, 6]  # caps 2, 1, 1
    assert [share.indices for share in split_level(REQUESTS[:5], [0.0] * 5, None, 2)] == [[0, 2, 4], [1, 3]]
    assert len(split_level(REQUESTS[:7], [], 2, 4)) == 2  # never more processes than slots
    assert len(split_level(REQUESTS[:1], [], None, 4)) == 1  # nor than requests


def test_the_client_check_reads_the_busiest_process_and_the_cores_they_could_use():
    """Two processes, 0.9 and 0.1 CPU seconds in 1 s: the busiest is at 90 % of a core, so the
    level fails though the average is 50 %."""
    from infbench.core.metrics import RequestResult
    from infbench.engines.server_metrics import MetricsSeries
    from infbench.serving.client import LevelRun, StreamedResult
    from infbench.serving.level_checks import client_ceiling_check

    results = [StreamedResult(RequestResult(f"r{i}#0", 2, 10, 0.01, 0.1, [0.01] * 9), "", 0.0) for i in range(10)]
    uneven = LevelRun(results, 1.0, MetricsSeries([]), 1.0, [], 0.0, processes=2, process_cpu_s=[0.9, 0.1])
    assert client_ceiling_check(uneven, None)["value"] == pytest.approx(0.9)
    even = LevelRun(results, 1.0, MetricsSeries([]), 0.6, [], 0.0, processes=2, process_cpu_s=[0.3, 0.3])
    heavy = ClientCost(cpu_per_request_s=0.0, cpu_per_chunk_s=1e-3, first_byte_ms=1.0, requests=32,
                       output_tokens=16, concurrency=16)  # fmt: skip
    # 100 chunks/s x 1 ms = 0.1 of a core over min(2, the CPUs this test may use) cores.
    cores = min(2, len(os.sched_getaffinity(0)))
    assert client_ceiling_check(even, heavy)["value"] == pytest.approx(max(0.3, 0.1 / cores))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ReferenceServer(
        "reference", tmp_path_factory.mktemp("ref") / "server.log", Schedule(ttft_ms=10, itl_ms=5, max_num_seqs=64)
    ) as running:
        yield running


def level(server, processes, **kwargs):
    return asyncio.run(
        run_level(
            server.base_url, "reference", REQUESTS, seed=3, interval_s=0.5, timeout_s=30, processes=processes,
            **kwargs,
        )
    )  # fmt: skip


# What a send may lag its time by on an idle machine: the worker's work for a request due just
# before it (1-2 ms measured) and asyncio rounding its timer up to the millisecond.
SEND_COST_S = 0.003


@pytest.mark.slow  # starts a server and client processes
def test_an_open_loop_over_two_processes_keeps_the_schedule_and_the_request_order(server):
    """Every request reaches its send at its time on the level's one clock, never before it,
    late by no more than a send's cost and two waits (its timer's, one turn for a CPU) measured
    alongside: the worst lag was 3.2 ms idle and 7.5 ms with three busy loops on 2 cores."""
    with SchedulingJitter() as jitter:
        two = level(server, 2, concurrency=None, arrivals=Arrivals(20.0))
    assert two.processes == 2 and len(two.process_cpu_s) == 2
    assert [s.result.request_id for s in two.results] == [r.id for r in REQUESTS]
    assert all(s.result.success and s.result.output_tokens == 8 for s in two.results)
    lags = [s.ready_at - (two.started + when) for s, when in zip(two.results, two.scheduled)]
    assert 0 <= min(lags) and max(lags) < jitter.allowance(SEND_COST_S, wakes=2), (lags, jitter)
    assert two.client_cpu_s > 0 and two.duration_s >= two.scheduled[-1]


@pytest.mark.slow  # starts a server and client processes
def test_a_closed_loop_over_three_processes_never_exceeds_its_concurrency(server):
    run = level(server, 3, concurrency=4, arrivals=None)
    assert run.processes == 3
    events = sorted(
        [(s.sent_at, 1) for s in run.results] + [(s.sent_at + s.result.e2el, -1) for s in run.results],
        key=lambda event: (event[0], event[1]),
    )
    in_flight = peak = 0
    for _, change in events:
        in_flight += change
        peak = max(peak, in_flight)
    assert 2 <= peak <= 4
    assert all(s.result.success for s in run.results)


@pytest.mark.slow  # starts a server and client processes
def test_a_worker_that_dies_stops_the_level_with_one_line_and_leaves_no_process(server, monkeypatch):
    """The planted fault: every second worker exits before it answers."""
    real = client_processes.WORKER
    started = []

    def popen(command, **kwargs):
        dying = [sys.executable, "-c", "import sys; sys.exit(3)"]
        process = original(dying if len(started) % 2 else real, **kwargs)
        started.append(process)
        return process

    original = client_processes.subprocess.Popen
    monkeypatch.setattr(client_processes.subprocess, "Popen", popen)
    with pytest.raises(RuntimeError, match=r"a client worker stopped \(exit status 3\) before it answered"):
        level(server, 2, concurrency=4, arrivals=None)
    assert len(started) == 2 and all(process.poll() is not None for process in started)


def test_auto_spreads_a_level_only_where_one_process_would_need_half_a_core():
    assert [processes_needed(share, cpus=4) for share in (0.1, 0.49, 0.5, 0.9, 3.0)] == [1, 1, 2, 4, 4]
    assert processes_needed(0.9, cpus=2) == 2
    cost = ClientCost(cpu_per_request_s=1e-3, cpu_per_chunk_s=50e-6, first_byte_ms=1.0, requests=32,
                      output_tokens=16, concurrency=16)  # fmt: skip
    # 20 req/s of 8 tokens: 0.02 + 160 chunks/s x 50 us = 0.028 of a core; 400 req/s: 0.56.
    assert expected_client_share(Level(None, Arrivals(20.0)), REQUESTS, cost) == pytest.approx(0.028)
    assert expected_client_share(Level(None, Arrivals(400.0)), REQUESTS, cost) == pytest.approx(0.56)
    assert expected_client_share(Level(None, Arrivals(400.0)), REQUESTS, None) == 0.0
