"""A level spread over several client processes: the requests dealt round-robin, the cap on
requests in flight split so that the level never exceeds it, every send at its scheduled
time on the one clock, the results back in request order, no worker outliving the level; and
load.client_processes auto choosing more than one only where the calibration says one would
be the limit. On the reference server, whose timing is known."""

from __future__ import annotations

import asyncio
import sys

import pytest

from infbench.serving import client_processes
from infbench.serving.arrivals import Arrivals
from infbench.serving.client import LoadRequest, run_level, split_level
from infbench.serving.client_cost import ClientCost
from infbench.serving.level_checks import processes_needed
from infbench.serving.reference_server import ReferenceServer, Schedule
from infbench.serving.sweep import Level, expected_client_share

REQUESTS = [LoadRequest(f"r{i}#0", "hello world", 2, 8) for i in range(24)]


def test_requests_are_dealt_round_robin_and_the_cap_split_to_its_total():
    shares = split_level(REQUESTS[:7], [0.1 * i for i in range(7)], 5, 3)
    assert [[r.id for r in share.requests] for share in shares] == [
        ["r0#0", "r3#0", "r6#0"],
        ["r1#0", "r4#0"],
        ["r2#0", "r5#0"],
    ]
    assert [share.scheduled for share in shares][1] == pytest.approx([0.1, 0.4])
    assert [share.concurrency for share in shares] == [2, 2, 1] and sum(s.concurrency for s in shares) == 5
    assert len(split_level(REQUESTS[:7], [], 2, 4)) == 2  # never more processes than slots
    assert len(split_level(REQUESTS[:1], [], None, 4)) == 1  # nor than requests


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


@pytest.mark.slow  # starts a server and client processes
def test_an_open_loop_over_two_processes_keeps_the_schedule_and_the_request_order(server):
    one = level(server, 1, concurrency=None, arrivals=Arrivals(20.0))
    two = level(server, 2, concurrency=None, arrivals=Arrivals(20.0))
    assert (one.processes, two.processes) == (1, 2)
    assert two.scheduled == one.scheduled  # the same schedule, whichever process sends a request
    assert [s.result.request_id for s in two.results] == [r.id for r in REQUESTS]
    assert all(s.result.success and s.result.output_tokens == 8 for s in two.results)
    lags = [s.ready_at - (two.started + when) for s, when in zip(two.results, two.scheduled)]
    assert 0 <= min(lags) and max(lags) < 0.05, lags
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
    assert expected_client_share(Level(None, Arrivals(20.0)), REQUESTS, None, cost) == pytest.approx(0.028)
    assert expected_client_share(Level(None, Arrivals(400.0)), REQUESTS, None, cost) == pytest.approx(0.56)
    assert expected_client_share(Level(None, Arrivals(400.0)), REQUESTS, None, None) == 0.0
