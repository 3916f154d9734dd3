"""The serving levels' steady-state windows, the sweep run on the reference server (a known
token schedule): a closed-loop or fixed-rate pass counts only the distinct requests sent in its
window, holds the load until they finish and takes throughput over the window; a pool that
runs out says so. The reference-server passes take real time (5-10 s each): they run with the
slow group, the pure window arithmetic with the fast one."""

import time

import pytest

from infbench.core.metrics import RequestResult
from infbench.engines.server_metrics import MetricsSeries
from infbench.serving.client import LevelRun, PassWindow, StreamedResult
from infbench.serving.level_checks import saturation_check
from infbench.serving.reference_server import ReferenceServer, Schedule
from infbench.serving.request_table import level_rows
from infbench.serving.sweep import run_sweep
from infbench.serving.window import PoolRanDry, WindowRun, window_output


def rows(count: int) -> list[dict]:
    return [
        {"id": f"r{i}", "prompt": f"prompt {i}", "prompt_tokens": 2, "max_tokens": 10, "api": "completions",
         "messages": [{"role": "user", "content": f"prompt {i}"}]}
        for i in range(count)
    ]  # fmt: skip


LOAD = {
    "concurrency": [4],
    "chat_concurrency": [],
    "users": [],
    "session_ramp": None,
    "request_rates": [20.0],
    "burstiness": 1.0,
    "max_concurrency": None,
    "ramp": None,
    "window_s": 0.6,
    "window_requests": 20,
    "repeats": 2,
    "warmup": False,
    "metrics_interval_s": 0.02,
    "slo_ms": {"ttft": 1000},
    "client_processes": "auto",
    "trace_scales": [1.0],
}
# 10 tokens 10 ms apart after a 20 ms TTFT: about 0.11 s a request.
SCHEDULE = Schedule(ttft_ms=20, itl_ms=10, max_num_seqs=8)


def sweep(server, pool: list[dict], **load) -> list[dict]:
    return run_sweep(
        server=server,
        workload=rows(4),
        pool=pool,
        load={**LOAD, **load},
        seed=0,
        timeout_s=30,
        tokenizer=None,
        prefix_caching=False,
        progress=lambda line: None,
    )


def check(repeat: dict, name: str) -> dict:
    return next(c for c in repeat["checks"] if c["name"] == name)


@pytest.mark.slow
def test_a_level_counts_the_distinct_requests_of_its_window_and_takes_throughput_over_it(tmp_path):
    with ReferenceServer("m", tmp_path / "server.log", SCHEDULE) as server:
        closed, rate = sweep(server, rows(1000))
    ids = []
    for level in (closed, rate):
        for repeat in level["repeats"]:
            window, counted = repeat["window"], repeat["requests"]
            assert window["seconds"] >= LOAD["window_s"] and len(counted) >= LOAD["window_requests"]
            assert all(window["opened_s"] <= r["sent_s"] <= window["closed_s"] for r in counted)
            # The ramp's, the hold's and the drain's requests were sent and finished, uncounted.
            uncounted = repeat["uncounted_requests"]
            assert window["finished"] == window["sent"] == len(counted) + len(uncounted) > len(counted)
            assert not [r for r in uncounted if window["opened_s"] <= r["sent_s"] < window["closed_s"]]
            assert check(repeat, "steady_window")["status"] == "pass"
            ids += [r["request_id"].split("#")[0] for r in counted]
    assert len(ids) == len(set(ids))  # no request twice, in a pass or across the sweep
    # Little's law in the window: 4 in flight over the median latency (less the turnaround).
    little = 4 / (closed["median_e2el_ms"] / 1000)
    assert 0.8 * little < closed["request_throughput"] < 1.05 * little
    assert closed["peak_num_requests_running"] == 4
    # The fixed rate: every counted request was scheduled in the window and left on time.
    for repeat in rate["repeats"]:
        assert all(r["scheduled_s"] >= repeat["window"]["opened_s"] - 0.05 for r in repeat["requests"])
    assert 15.0 < rate["offered_request_rate"] < 27.0 and 15.0 < rate["achieved_request_rate"] < 27.0
    # The request table: every repeat's counted and uncounted requests, the rate's on its schedule.
    table = level_rows([closed, rate], LOAD["slo_ms"])
    for level, name in ((closed, "c=4"), (rate, "rate=20/s")):
        for number, repeat in enumerate(level["repeats"], start=1):
            assert repeat["cancelled_requests"] == []  # a level's pass lets its last requests finish
            mine = [r for r in table if r["measurement"] == name and r["pass"] == number]
            assert {r["pass_started_unix"] for r in mine} == {repeat["started_unix"]}
            assert 0 < time.time() - repeat["started_unix"] < 600
            assert [r["sent_s"] for r in mine] == sorted(r["sent_s"] for r in mine)
            assert [r["met_slo"] for r in mine] == [r["success"] and r["last_token_s"] is not None for r in mine]
            assert sum(r["counted"] for r in mine) == len(repeat["requests"])
            assert len(mine) == repeat["window"]["finished"]
            assert [r["request_id"] for r in mine if r["counted"]] == [r["request_id"] for r in repeat["requests"]]
            assert all((r["scheduled_s"] is not None) == (name != "c=4") for r in mine)
    assert len(table) == sum(r["window"]["finished"] for level in (closed, rate) for r in level["repeats"])


@pytest.mark.slow
def test_an_overloaded_rate_reports_what_the_server_completed_not_what_was_sent(tmp_path):
    # 8 slots of 0.11 s serve about 70 req/s; 200 req/s are sent, uncapped, and queue.
    with ReferenceServer("m", tmp_path / "server.log", SCHEDULE) as server:
        (rate,) = sweep(server, rows(3000), concurrency=[], request_rates=[200.0], repeats=1, window_requests=40)
    (repeat,) = rate["repeats"]
    sent_rate = len(repeat["requests"]) / repeat["window"]["seconds"]
    assert sent_rate > 150  # the counted requests left on schedule
    assert 50 < rate["request_throughput"] < 80 and rate["output_throughput"] < 800  # what 8 slots complete
    assert check(repeat, "achieved_vs_offered_rate")["status"] == "warn"


@pytest.mark.slow
def test_a_rate_level_capped_in_flight_counts_requests_when_sent_and_records_their_wait(tmp_path):
    # 40 req/s against 2 slots of 0.11 s each: at most 18 req/s get out, the rest wait.
    with ReferenceServer("m", tmp_path / "server.log", SCHEDULE) as server:
        (rate,) = sweep(server, rows(1000), concurrency=[], request_rates=[40.0], max_concurrency=2, repeats=1)
    (repeat,) = rate["repeats"]
    assert rate["peak_num_requests_running"] <= 2
    assert all(repeat["window"]["opened_s"] <= r["sent_s"] <= repeat["window"]["closed_s"] for r in repeat["requests"])
    assert rate["median_client_queue_time_ms"] > 50
    assert check(repeat, "client_queue")["status"] == "warn"


@pytest.mark.slow
def test_a_capped_rate_draws_a_request_when_it_is_sent_so_its_queue_does_not_use_up_the_pool(tmp_path):
    # 40 req/s against 2 slots (about 18 req/s): 30 rows last a pass drawn at send, not at the
    # schedule's pace; the ramp lasts as many completions as the cap.
    with ReferenceServer("m", tmp_path / "server.log", SCHEDULE) as server:
        (rate,) = sweep(
            server, rows(30), concurrency=[], request_rates=[40.0], max_concurrency=2, repeats=1, window_requests=8
        )
    (repeat,) = rate["repeats"]
    assert check(repeat, "steady_window")["status"] == "pass" and repeat["window"]["sent"] < 30
    ends = sorted(r["sent_s"] + r["e2el"] for r in repeat["requests"] + repeat["uncounted_requests"])
    assert ends[1] - 1e-6 <= repeat["window"]["opened_s"]  # not before the second completion


def test_the_window_output_counts_completions_and_spreads_tokens_over_chunks_inside_it():
    def streamed(sent, ttft, itl, tokens):
        result = RequestResult("r", 2, tokens, ttft, ttft + sum(itl), itl)
        return StreamedResult(result, "", sent)

    # Window [1.0, 2.0) s from a start at 100. A: chunks at 0.5, 1.0, 1.5 (2 of 3 inside, 6
    # tokens: 4 in), completes at 1.5 (in). B: chunks at 1.8, 2.0 (1 of 2 inside, 2 tokens: 1),
    # completes at 2.0 (the window's end: out). C: done before the window opened.
    results = [streamed(100.2, 0.3, [0.5, 0.5], 6), streamed(101.5, 0.3, [0.2], 2), streamed(100.0, 0.1, [0.1], 2)]
    run = WindowRun(results, [True, True, False], 1.0, 2.0, 2.5, MetricsSeries(), 100.0, False, 3)
    assert window_output(run) == (1, 2, pytest.approx(4 + 1))


@pytest.mark.slow
def test_a_pool_that_runs_out_fails_the_steady_window_check_or_stops_the_stage(tmp_path):
    with ReferenceServer("m", tmp_path / "server.log", SCHEDULE) as server:
        # 30 rows: the ramp's 4, then the window's 20 and more: the pool ends inside the pass.
        (closed,) = sweep(server, rows(30), request_rates=[], repeats=1, window_s=5.0)
        (repeat,) = closed["repeats"]
        assert repeat["window"]["cut_short"] and repeat["window"]["sent"] == 30
        assert check(repeat, "steady_window")["status"] == "fail"
        assert "workload.pool_requests" in check(repeat, "steady_window")["detail"]
        # 4 rows: the ramp uses them all, and nothing is counted.
        with pytest.raises(PoolRanDry, match="raise workload.pool_requests"):
            sweep(server, rows(4), request_rates=[], repeats=1)


def windowed_rate_pass(counted: int, completed: int, waiting: list[float]) -> LevelRun:
    """An open-loop pass with a window of 8 s: `counted` requests sent in it, `completed`
    completed in it, and the server's waiting requests at evenly spaced scrapes."""
    samples = [{"t": 8 * (i + 0.5) / len(waiting), "vllm:num_requests_waiting": w} for i, w in enumerate(waiting)]
    window = PassWindow(
        opened_s=0.0,
        closed_s=8.0,
        ended_s=14.0,
        sent=counted + 4,
        finished=[],
        cut_short=False,
        completed=completed,
        completed_prompt_tokens=0,
        output_tokens=0.0,
    )
    return LevelRun([None] * counted, 8.0, MetricsSeries(samples), 0.0, [0.0] * counted, 0.0, window=window)


def test_the_saturation_check_is_the_capacity_searchs_rule_not_a_few_requests_spread():
    rates = {"offered": 1.2, "sent": 1.3, "achieved": 0.8}
    # 10 sent in the window, 6 completed in it, nothing waiting: a server that keeps up, whose
    # completions of a few requests spread over their latencies (a 90 % rule warned here).
    kept_up = saturation_check(windowed_rate_pass(10, 6, [0, 0, 0, 0, 0, 0]), rates)
    assert kept_up["status"] == "pass" and kept_up["value"] == pytest.approx(0.6)
    # Completions at under half the rate sent: saturated.
    assert saturation_check(windowed_rate_pass(10, 4, [0] * 6), rates)["status"] == "warn"
    # Completions keep pace but the queue grows: saturated, and it says so.
    growing = saturation_check(windowed_rate_pass(10, 9, [0, 0, 1, 3, 4, 6]), rates)
    assert growing["status"] == "warn" and "waiting in the server rose" in growing["detail"]
