"""A pass spread over several client processes (ClientPool): the cap on requests in flight
kept, every send at its scheduled time on the one clock, the results back in request order,
a cancelled request stopped in its worker, a worker that stops ending the pass, no worker
outliving it; and
load.client_processes auto choosing more than one only where the calibration says one would
be the limit. On the reference server, whose timing is known."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import threading
import time

import httpx
import pytest
from timing import SchedulingJitter

from infbench.engines.server_metrics import parse_metrics
from infbench.serving import client_processes
from infbench.serving.arrivals import Arrivals
from infbench.serving.client import LoadRequest, run_level
from infbench.serving.client_cost import ClientCost
from infbench.serving.level_checks import processes_needed
from infbench.serving.reference_server import ReferenceServer, Schedule
from infbench.serving.sweep import Level, expected_client_share
from infbench.serving.window import Window, run_window

REQUESTS = [LoadRequest(f"r{i}#0", "hello world", 2, 8) for i in range(24)]


def test_the_client_check_reads_the_busiest_process_and_the_cores_they_could_use():
    """Two processes, 0.9 and 0.1 CPU seconds in 1 s: the busiest is at 90 % of a core, so the
    level fails though the average is 50 %."""
    from infbench.core.metrics import RequestResult
    from infbench.engines.server_metrics import MetricsSeries
    from infbench.serving.client import LevelRun, StreamedResult
    from infbench.serving.level_checks import client_ceiling_check

    results = [StreamedResult(RequestResult(f"r{i}#0", 2, 10, 0.01, 0.1, [0.01] * 9), "", 0.0) for i in range(10)]
    # Each worker's CPU seconds, then the dispatching process's.
    uneven = LevelRun(results, 1.0, MetricsSeries([]), 1.05, [], 0.0, processes=2, process_cpu_s=[0.9, 0.1, 0.05])
    assert client_ceiling_check(uneven, None)["value"] == pytest.approx(0.9)
    even = LevelRun(results, 1.0, MetricsSeries([]), 0.65, [], 0.0, processes=2, process_cpu_s=[0.3, 0.3, 0.05])
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


# What a send may lag its time by on an idle machine: the dispatcher's work for a request due
# just before it and asyncio rounding its timer up to the millisecond; and what the hand-over to
# a worker may take (at most 1.2 ms measured, docs/method.md#serving-metrics-arrivals-repeats-the-client).
SEND_COST_S = 0.003


@pytest.mark.slow  # starts a server and client processes
def test_an_open_loop_over_two_processes_keeps_the_schedule_and_the_request_order(server):
    """Every request reaches its send at its time on the level's one clock, never before it,
    late by no more than a send's cost and two waits (its timer's, one turn for a CPU) measured
    alongside: the worst lag was 3.2 ms idle and 7.5 ms with three busy loops on 2 cores. Its
    worker sends it within the same allowance (the hand-over: its worker's turn to read it)."""
    with SchedulingJitter() as jitter:
        two = level(server, 2, concurrency=None, arrivals=Arrivals(20.0))
    assert two.processes == 2 and len(two.process_cpu_s) == 3  # the two workers and the process dispatching
    assert [s.result.request_id for s in two.results] == [r.id for r in REQUESTS]
    assert all(s.result.success and s.result.output_tokens == 8 for s in two.results)
    lags = [s.ready_at - (two.started + when) for s, when in zip(two.results, two.scheduled)]
    assert 0 <= min(lags) and max(lags) < jitter.allowance(SEND_COST_S, wakes=2), (lags, jitter)
    handovers = [s.sent_at - s.ready_at for s in two.results]
    assert 0 <= min(handovers) and max(handovers) < jitter.allowance(SEND_COST_S, wakes=2), (handovers, jitter)
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


def running_on(server) -> float:
    return parse_metrics(httpx.get(f"{server.base_url}/metrics").text)["vllm:num_requests_running"]


@pytest.mark.slow  # starts a server and client processes
def test_a_windowed_pass_over_two_processes_cancels_what_it_left_in_flight(server):
    """The pass ends once its last counted request has: the uncounted ones the workers still
    stream are recorded as cancelled, as from one process, and the server is left idle (the
    cancel itself: test_a_request_cancelled_in_the_pool_is_stopped_in_its_worker)."""
    long = [LoadRequest(f"long{i}#0", "hello world", 2, 400 if i % 2 else 8) for i in range(200)]
    run = asyncio.run(
        run_window(server.base_url, "reference", iter(long), window=Window(0.2, 4), concurrency=4, arrivals=None,
                   seed=0, interval_s=0.05, timeout_s=30, processes=2)
    )  # fmt: skip
    assert run.processes == 2 and run.counted_results and run.cancelled
    # Read from /proc at the pass's start and end: the workers parsed every stream, the dispatcher little.
    *workers, dispatcher = run.process_cpu_s
    assert len(workers) == 2 and min(workers) > 0.01 and run.client_cpu_s == pytest.approx(sum(run.process_cpu_s))
    assert running_on(server) == 0


@pytest.mark.slow  # starts a server and client processes
def test_a_worker_killed_mid_pass_fails_the_windowed_pass_with_one_line(server, monkeypatch):
    """The planted fault: the second worker is killed once the pass is streaming, in a pass that
    would last seconds; the pass stops there, not at its end, and no worker is left."""
    started, killed_at = [], []
    original = client_processes.subprocess.Popen

    def popen(command, **kwargs):
        started.append(original(command, **kwargs))
        return started[-1]

    def kill_once_streaming():
        while running_on(server) < 2:
            time.sleep(0.01)
        killed_at.append(time.perf_counter())
        started[1].kill()

    monkeypatch.setattr(client_processes.subprocess, "Popen", popen)
    killer = threading.Thread(target=kill_once_streaming)
    killer.start()
    with pytest.raises(RuntimeError, match=r"a client worker stopped \(exit status -9\) before it answered"):
        asyncio.run(
            run_window(server.base_url, "reference", itertools.cycle(REQUESTS), window=Window(5.0, 1000),
                       concurrency=4, arrivals=None, seed=0, interval_s=0.05, timeout_s=30, processes=2)
        )  # fmt: skip
    killer.join()
    assert time.perf_counter() - killed_at[0] < 2.0  # the window alone would run 5 s
    assert len(started) == 2 and all(process.poll() is not None for process in started)


@pytest.mark.slow  # starts a server and client processes
def test_a_request_cancelled_in_the_pool_is_stopped_in_its_worker(server):
    """A request whose task is cancelled (a pass ending, a user's session cut off) is cancelled in
    the worker streaming it, the pool still open: the server stops it at once."""

    async def cancel_one():
        async with client_processes.ClientPool(2, server.base_url, 30, None) as pool:
            task = asyncio.ensure_future(pool.stream("reference", LoadRequest("long#0", "hi", 2, 400), "completions"))
            await asyncio.sleep(0.3)
            streaming = await asyncio.to_thread(running_on, server)
            task.cancel()
            await asyncio.sleep(0.1)
            return streaming, await asyncio.to_thread(running_on, server)

    assert asyncio.run(cancel_one()) == (1, 0)  # 400 tokens 5 ms apart would stream for 2 s


@pytest.mark.slow  # starts a server and client processes
def test_each_request_goes_to_the_worker_with_the_fewest_in_flight(server):
    """A long request, then a short one; once the short one is back, the next goes to the worker
    that held it (none in flight), not in turn to the one still streaming the long one."""

    async def spread():
        async with client_processes.ClientPool(2, server.base_url, 30, None) as pool:

            def send(name, tokens):
                request = LoadRequest(f"{name}#0", "hi", 2, tokens)
                return asyncio.ensure_future(pool.stream("reference", request, "completions"))

            long = send("long", 200)
            await send("short", 2)
            third = send("third", 2)
            await asyncio.sleep(0)
            in_flight = [len(worker.pending) for worker in pool.workers]
            await asyncio.gather(long, third)
            return in_flight

    assert asyncio.run(spread()) == [1, 1]


def test_a_processs_cpu_seconds_are_read_from_proc_as_it_counts_them():
    started = (client_processes.cpu_seconds(os.getpid()), time.process_time())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # burn a third of a second of CPU
        pass
    read = client_processes.cpu_seconds(os.getpid()) - started[0]
    assert read == pytest.approx(time.process_time() - started[1], abs=0.03)


@pytest.mark.slow  # starts a server and client processes
def test_a_pass_whose_answers_outrun_the_pipes_does_not_deadlock(tmp_path):
    """128 streams of 512 tokens after 4 KB prompts, all finishing together: the workers'
    answers (6 KB each) and the dispatcher's next requests fill both pipes at once. Written
    blocking, each side then waited on the other for ever (a pass of 3 s never ended); written
    through the event loop, it ends."""
    prompt = "word " * 800
    requests = (LoadRequest(f"big{i}#0", prompt, 800, 512) for i in itertools.count())
    outcome = []
    schedule = Schedule(ttft_ms=10, itl_ms=1, max_num_seqs=256)
    with ReferenceServer("reference", tmp_path / "server.log", schedule) as wide:

        def measure():
            outcome.append(
                asyncio.run(
                    run_window(
                        wide.base_url,
                        "reference",
                        requests,
                        window=Window(0.5, 128),
                        concurrency=128,
                        arrivals=None,
                        seed=0,
                        interval_s=0.5,
                        timeout_s=60,
                        processes=2,
                    )
                )  # fmt: skip
            )

        runner = threading.Thread(target=measure, daemon=True)
        runner.start()
        runner.join(timeout=60)
    assert outcome and len(outcome[0].counted_results) >= 128, "the pass never ended"
