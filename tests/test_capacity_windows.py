"""Windowed passes on the reference server (a known token schedule): only requests that lived
their whole life under the target load are counted, requests are never repeated in a probe,
and an open loop held above the server's throughput is called saturated."""

import asyncio
import time
from collections import Counter

import httpx
import pytest
from conftest import check_probes, searched
from timing import SchedulingJitter

from infbench.capacity.measure import search_capacity
from infbench.capacity.probe import PassRecord, Prober, TimeBudget, missed_whatever_follows, verdict
from infbench.core.level_names import level_case
from infbench.core.metrics import RequestResult
from infbench.serving.arrivals import Arrivals
from infbench.serving.client import load_request
from infbench.serving.reference_server import ReferenceServer, Schedule
from infbench.serving.window import MeasuredPass, RequestSupply, Window, run_window

ROWS = [{"id": f"r{i}", "prompt": f"prompt {i}", "prompt_tokens": 2, "max_tokens": 10} for i in range(300)]


def windowed(server, supply, window, **level):
    return asyncio.run(
        run_window(server.base_url, "m", supply, window=window, seed=0, interval_s=0.02, timeout_s=30, **level)
    )


def open_loop_passes(server, rows, rates, window, slo_ms) -> dict:
    """One open-loop pass record at each rate, in turn, on distinct requests."""
    supply = RequestSupply(rows, load_request, seed=1)
    return {
        rate: PassRecord.of(
            MeasuredPass.of(windowed(server, supply.take(), window, concurrency=None, arrivals=Arrivals(rate)), True),
            slo_ms,
        ).to_json()
        for rate in rates
    }


@pytest.mark.parametrize("processes", [1, 3])
def test_a_closed_loop_counts_only_requests_sent_in_its_window_with_the_load_held(tmp_path, processes):
    """From one client process, and from three (ClientPool workers streaming, this process
    keeping the window): the same pass."""
    # 10 tokens 10 ms apart after a 20 ms TTFT: about 0.11 s a request, 4 in flight.
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=10, max_num_seqs=8)) as server:
        supply = RequestSupply(ROWS, load_request, seed=1)
        run = windowed(server, supply.take(), Window(0.8, 20), concurrency=4, arrivals=None, processes=processes)
    assert run.processes == processes and len(run.process_cpu_s or [None]) == (processes + 1 if processes > 1 else 1)
    opening = [r.sent_at - run.started for r in run.results[:4]]
    assert max(opening) < run.opened_s and not any(run.counted[:4])  # the opening wave is the ramp
    # The ramp: until as many requests have completed as are in flight (4).
    ends = sorted(r.sent_at + r.result.e2el - run.started for r in run.results)
    assert ends[3] - 1e-6 <= run.opened_s < ends[4] + 0.05
    counted = run.counted_results
    assert run.window_s >= 0.8 and len(counted) >= 20
    # Counted when handed over, a worker sends it a hand-over later
    # (docs/method.md#serving-metrics-arrivals-repeats-the-client).
    handover_s = 0.05 if processes > 1 else 0.0
    assert all(run.opened_s <= r.sent_at - run.started <= run.closed_s + handover_s for r in counted)
    assert not any(c for r, c in zip(run.results, run.counted) if not run.opened_s <= r.sent_at - run.started)
    # Held: from the window's opening to the last counted request's last token, 4 were running
    # (but for a scrape that falls between a request's end and its slot's next send).
    last = max(r.sent_at + r.result.e2el - run.started for r in counted)
    running = [s["vllm:num_requests_running"] for s in run.metrics.samples if run.opened_s <= s["t"] < last]
    assert len(running) >= 10 and running.count(4) >= 0.75 * len(running), running
    # Distinct: no prompt twice in the pass; counted requests' throughput is taken over the window.
    prompts = [r.result.request_id.split("#")[0] for r in run.results]
    assert len(prompts) == len(set(prompts))
    record = PassRecord.of(MeasuredPass.of(run, False), {"ttft": 1000}).to_json()
    assert record["sent"] == run.sent >= len(run.results) >= len(counted) + 4  # the opening wave is sent, not counted
    assert record["requests"] == len(counted) and record["met_slo"] == len(counted)
    little = 4 / (record["median_e2el_ms"] / 1000)  # Little's law: c / latency (less the turnaround)
    assert 0.8 * little < record["request_throughput"] < 1.05 * little


def test_a_probe_never_repeats_a_request_and_a_short_pool_says_so(tmp_path):
    supply = RequestSupply(ROWS[:10], load_request, seed=1)
    first = [r.id.split("#")[0] for r in supply.take()]
    assert sorted(first) == sorted(r["id"] for r in ROWS[:10])  # each row once, in a seeded order
    taken = supply.take()
    assert [next(taken).id.split("#")[0] for _ in range(3)] == first[:3]  # used up: the order again
    # The next probe goes on from the fourth and wraps round to the three before, none twice.
    assert [r.id.split("#")[0] for r in supply.take()] == first[3:] + first[:3]
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=10)) as server:
        run = windowed(
            server, RequestSupply(ROWS[:10], load_request, 1).take(), Window(5.0), concurrency=4, arrivals=None
        )
        assert run.exhausted and run.sent == len(run.results) == 10  # stopped at the pool's end, never cycled
        assert PassRecord.of(MeasuredPass.of(run, False), {"ttft": 1000}).to_json()["supply_exhausted"] is True
        # A pool that runs dry before the ramp is over: no window opens, nothing is counted.
        short = windowed(
            server, RequestSupply(ROWS[:3], load_request, 1).take(), Window(1.0), concurrency=4, arrivals=None
        )
        assert short.exhausted and short.opened_s is None and not any(short.counted)
        assert PassRecord.of(MeasuredPass.of(short, False), {"ttft": 1000}).to_json()["requests"] == 0


@pytest.mark.slow  # about 5 s: the saturated pass holds its load until its counted requests drain
def test_an_open_loop_above_the_servers_throughput_is_saturated_and_one_below_is_not(tmp_path):
    # Two slots of about 0.11 s each: the server completes at most about 18 requests a second.
    schedule = Schedule(ttft_ms=20, itl_ms=10, max_num_seqs=2)
    with ReferenceServer("m", tmp_path / "server.log", schedule) as server:
        records = open_loop_passes(server, ROWS, (6.0, 60.0), Window(0.6, 10), {"ttft": 1000})
    assert not records[6.0]["saturated"], records[6.0]
    assert (
        records[60.0]["saturated"]
        and records[60.0]["achieved_request_rate"] < 0.5 * records[60.0]["offered_request_rate"]
    )
    assert records[60.0]["queue_growing"]


@pytest.mark.slow  # a server start; the fast group stays under a minute
def test_the_ramp_ends_after_as_many_completions_as_slots_not_at_the_slowest_opener(tmp_path):
    """Two of the opening four requests are long (60 tokens, about 0.6 s): the window opens
    once four requests have completed (the two short openers and two short successors), not
    when the long ones end."""
    long = [{"id": f"long{i}", "prompt": "p", "prompt_tokens": 1, "max_tokens": 60} for i in range(2)]
    short = [{"id": f"short{i}", "prompt": "p", "prompt_tokens": 1, "max_tokens": 10} for i in range(200)]
    requests = iter([load_request(row, 0) for row in long + short])
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=10)) as server:
        run = windowed(server, requests, Window(0.3, 4), concurrency=4, arrivals=None)
    ends = sorted(r.sent_at + r.result.e2el - run.started for r in run.results)
    # A 60-token request takes 20 + 59 x 10 = 610 ms by the schedule, a 10-token one 110 ms: the
    # fourth completion comes near 0.22 s; 0.5 s leaves room for a busy machine, none for 0.61 s.
    assert ends[3] - 1e-6 <= run.opened_s < 0.5


@pytest.mark.slow  # a concurrency search, then three open-loop probes of about 1.5 s windows
def test_the_rate_search_is_seeded_by_the_capacitys_throughput_and_windowed_by_its_latency(tmp_path):
    # TPOT about 2 + 2c ms: under the 17 ms SLO up to c = 7, over it from c = 8.
    schedule = Schedule(ttft_ms=10, itl_ms=2, itl_ms_per_running=2, max_num_seqs=64)
    settings = {
        "attainment": 0.9, "window_s": 0.3, "window_requests": 40, "repeats": 1, "start_concurrency": 4,
        "max_concurrency": 16, "max_probes": 3, "tolerance": 0.0, "rate": True, "min_rate": 0.1, "runs": 1,
        "max_search_s": 300,
    }  # fmt: skip
    load_settings = {
        "burstiness": 1.0,
        "warmup": False,
        "metrics_interval_s": 0.05,
        "slo_ms": {"ttft": 150, "tpot": 17},
    }
    pool = [{**row, "max_tokens": 8, "api": "completions", "id": f"{row['id']}-{i}"} for i, row in enumerate(ROWS * 8)]
    record = searched(tmp_path, schedule, pool, settings, load_settings)
    search, rate = record["concurrency"], record["request_rate"]
    # Seeded by the request rate the closed loop completed at its capacity (Little's law) ...
    assert rate["probes"][0]["load"] == pytest.approx(
        max(search["at_capacity"]["request_throughput"]["mean"], settings["min_rate"])
    )
    # ... never above the most requests per second any closed-loop probe completed ...
    highest = max(p["request_throughput"]["mean"] for p in search["probes"])
    assert max(p["load"] for p in rate["probes"]) <= max(highest, rate["probes"][0]["load"]) * (1 + 1e-9)
    # ... in windows of at least ten median latencies of the closed loop at its capacity.
    long_enough = max(settings["window_s"], 10 * search["at_capacity"]["median_e2el_ms"] / 1000)
    assert long_enough > 1.0
    for probe in rate["probes"]:
        assert probe["window"]["seconds"] == pytest.approx(long_enough)
        for one in probe["pass_records"]:
            opened, closed = one["window_s"]
            assert closed - opened >= long_enough and one["sent"] > one["requests"] > 0
    assert rate["trace_rate"] is None
    # The request table holds every request each probe's passes sent: counted, uncounted, and
    # those cut off when a pass ended (never counted), under the probe's numeric load.
    probes = [*search["probes"], *rate["probes"]]
    table, passes = record["requests"], [one for p in probes for one in p["pass_records"] + p["stalled_passes"]]
    assert len(table) == sum(one["sent"] for one in passes) and sum(r["counted"] for r in table) == sum(
        p["requests"] for p in probes
    )
    cancelled = [r for r in table if r["failure_cause"] == "cancelled"]
    assert cancelled and not any(r["counted"] or r["success"] or r["met_slo"] for r in cancelled)
    assert {r["measurement"] for r in table if r["max_concurrency"] is not None} == {
        f"c={p['load']}" for p in search["probes"]
    }
    assert {r["request_rate"] for r in table if r["max_concurrency"] is None} == {p["load"] for p in rate["probes"]}
    # Per probe and pass, the counted rows that met the SLO are the pass's own count of them.
    met_rows, met_passes = Counter(), Counter()
    for row in table:
        met_rows[row["measurement"], row["pass"]] += row["counted"] and row["met_slo"]
    for probe in [*search["probes"], *rate["probes"]]:
        closed = probe in search["probes"]
        name = level_case(None if closed else probe["load"], probe["load"] if closed else None, 1.0)
        for one in probe["pass_records"]:  # a stalled pass measured again counted nothing
            met_passes[name, one["pass"]] += one["met_slo"]
    assert met_rows == met_passes and 0 < met_rows.total() < sum(r["counted"] for r in table)
    # Every probe of both searches, open loop too, holds what a probe must.
    check_probes([*search["probes"], *rate["probes"]], settings, settings["attainment"])


@pytest.mark.slow  # a server start and two short open-loop probes
def test_a_rate_the_client_cannot_send_is_never_met(tmp_path):
    """At 20,000 req/s one client process (several hundred µs of CPU a request) falls further
    behind its schedule with every request: the probe was not offered its rate, so it is not
    met however well the server did, and gets no second window; at 20 req/s the client keeps
    its schedule."""
    schedule = Schedule(ttft_ms=0, itl_ms=0, max_num_seqs=4096, num_blocks=1 << 20)
    rows = [{**row, "id": f"{row['id']}-{i}", "max_tokens": 2, "api": "completions"} for i, row in enumerate(ROWS * 40)]
    settings = {"attainment": 0.9, "window_s": 0.3, "window_requests": 40, "repeats": 3}
    load_settings = {"burstiness": 1.0, "warmup": False, "metrics_interval_s": 0.05, "slo_ms": {"ttft": 60_000}}
    with ReferenceServer("m", tmp_path / "server.log", schedule) as server:
        prober = Prober(server, rows, rows, settings, load_settings, seed=0, timeout_s=5, progress=lambda line: None)
        slow, fast = prober.probe("request_rate", 20.0), prober.probe("request_rate", 20_000.0)
    kept = slow.record["pass_records"][0]
    assert not slow.client_limited and slow.met and kept["send_lag_growth_ms"] < 0.1 * 1000 * 0.3, kept
    one = fast.record["pass_records"]
    window_ms = (one[0]["window_s"][1] - one[0]["window_s"][0]) * 1000
    assert fast.client_limited and len(one) == 1 and one[0]["send_lag_growth_ms"] > 0.1 * window_ms, one[0]
    # Every counted request met the SLO, yet the probe is neither met nor decided.
    assert fast.record["met_slo"] == fast.record["requests"] > 0
    assert not fast.met and not fast.decided and fast.record["decision"] == "undecided"
    records = [probe.record | {"met": probe.met, "decided": probe.decided} for probe in (slow, fast)]
    check_probes(records, settings, 0.9)


def test_a_window_waiting_only_on_its_request_count_ends_once_the_probe_is_missed_whatever_follows(tmp_path):
    """Every request misses a 5 ms TPOT (tokens 10 ms apart): at c=1 the window's 0.1 s are up
    after about three requests, and it closes once eight misses make the probe missed even if the
    rest of its 40 had met; a probe whose requests meet the SLO still counts all 40."""
    schedule = Schedule(ttft_ms=5, itl_ms=10, max_num_seqs=8)
    rows = [{**row, "max_tokens": 4, "api": "completions"} for row in ROWS]
    settings = {"attainment": 0.9, "window_s": 0.1, "window_requests": 40, "repeats": 3}
    load_settings = {
        "burstiness": 1.0,
        "warmup": False,
        "metrics_interval_s": 0.05,
        "slo_ms": {"ttft": 1000, "tpot": 5},
    }
    lines = []
    with ReferenceServer("m", tmp_path / "server.log", schedule) as server:
        prober = Prober(server, rows, rows, settings, load_settings, seed=0, timeout_s=5, progress=lines.append)
        missing = prober.probe("concurrency", 1)
        lenient_load_settings = {**load_settings, "slo_ms": {"tpot": 1000}}
        meeting = Prober(
            server, rows, rows, settings, lenient_load_settings, seed=0, timeout_s=5, progress=lines.append
        ).probe("concurrency", 1)
    (early,) = missing.record["pass_records"]
    assert early["settled_early"] and early["met_slo"] == 0 and early["requests"] < 12, early
    assert missing.decided and missing.record["decision"] == "missed" and "ended once missed" in lines[0]
    # The first window's count that decides: 40 less the fewest misses that make 40 a miss.
    fewest = min(f for f in range(41) if verdict(40 - f, 40, 0.9) == "missed")
    assert early["requests"] == fewest  # at c=1 nothing else is in flight when the window closes
    (whole,) = meeting.record["pass_records"]
    assert not whole["settled_early"] and whole["requests"] == 40 and meeting.record["decision"] == "met"
    records = [probe.record | {"met": probe.met, "decided": probe.decided} for probe in (missing, meeting)]
    check_probes(records, settings, 0.9)


def test_a_probe_warms_its_load_untimed_before_its_first_pass(tmp_path, monkeypatch):
    """With load.warmup, each probe first sends, untimed and before its pass, as many of the
    workload's first requests as its load keeps in flight (one at a rate), all at once and cut
    to WARMUP_MAX_TOKENS, none of them a pool request: the server's request ids count them and
    the passes' sent, no more. Without it, the passes' sent alone."""
    import infbench.capacity.probe as probe_module
    from infbench.workload.requests import WARMUP_MAX_TOKENS

    schedule = Schedule(ttft_ms=2, itl_ms=1, max_num_seqs=8)
    workload = [{**row, "id": f"w{i}", "max_tokens": 40, "api": "completions"} for i, row in enumerate(ROWS[:10])]
    pool = [{**row, "max_tokens": 4, "api": "completions"} for row in ROWS * 2]
    pool = [{**row, "id": f"{row['id']}-{i}"} for i, row in enumerate(pool)]
    settings = {"attainment": 0.9, "window_s": 0.05, "window_requests": 40, "repeats": 1}
    load_settings = {"burstiness": 1.0, "metrics_interval_s": 0.05, "slo_ms": {"ttft": 1000}}
    calls = []
    run_level, measure_pass = probe_module.run_level, probe_module.measure_pass

    async def warm_up(base_url, model, requests, **level):
        calls.append(("warm-up", requests, level["concurrency"]))
        return await run_level(base_url, model, requests, **level)

    def measured(*args, **kwargs):
        calls.append(("pass", None, kwargs["concurrency"]))
        return measure_pass(*args, **kwargs)

    monkeypatch.setattr(probe_module, "run_level", warm_up)
    monkeypatch.setattr(probe_module, "measure_pass", measured)

    def next_id(server) -> int:
        body = {"model": "m", "prompt": "a", "max_tokens": 1}
        return int(httpx.post(f"{server.base_url}/v1/completions", json=body).json()["id"].removeprefix("ref-"))

    with ReferenceServer("m", tmp_path / "server.log", schedule) as server:
        prober = Prober(
            server, workload, pool, settings, {**load_settings, "warmup": True}, seed=0, timeout_s=5,
            progress=lambda line: None,
        )  # fmt: skip
        warmed = [prober.probe("concurrency", 4), prober.probe("concurrency", 2), prober.probe("request_rate", 50.0)]
        after_warmed = next_id(server)
        cold = Prober(
            server, workload, pool, settings, {**load_settings, "warmup": False}, seed=0, timeout_s=5,
            progress=lambda line: None,
        ).probe("concurrency", 4)  # fmt: skip
        after_cold = next_id(server)
    assert [p.record["warmup_requests"] for p in warmed] == [4, 2, 1] and cold.record["warmup_requests"] == 0
    assert [(kind, len(requests) if requests else None, concurrency) for kind, requests, concurrency in calls] == [
        ("warm-up", 4, 4), ("pass", None, 4), ("warm-up", 2, 2), ("pass", None, 2), ("warm-up", 1, 1),
        ("pass", None, None), ("pass", None, 4),
    ]  # fmt: skip
    # The workload's rows ("w..."), not the pool's ("r..."), cut short.
    warm = [request for _, requests, _ in calls for request in requests or []]
    assert all(r.max_tokens == WARMUP_MAX_TOKENS and r.id.startswith("warmup-w") for r in warm)
    assert after_warmed == 7 + sum(p.record["sent"] for p in warmed)
    assert after_cold == after_warmed + 1 + cold.record["sent"]
    assert all(p.record["requests"] >= 40 for p in [*warmed, cold])


def test_a_window_settles_only_where_every_outcome_of_the_rest_misses_and_closing_keeps_the_miss():
    """missed_whatever_follows against brute force over prior passes and planned counts: settled
    exactly when every count of meets among the requests not yet seen to miss gives a missed
    probe, and then closing with any fewer counted requests (the same misses) is missed too."""
    miss = RequestResult("r", 2, 3, ttft=0.0, e2el=1.0)  # TPOT 500 ms
    for prior_counted in (0, 10, 40):
        for prior_met in range(0, prior_counted + 1, 5):
            for planned in (10, 40):
                for misses in range(planned + 1):
                    settled = missed_whatever_follows(prior_met, prior_counted, planned, 0.9, {"tpot": 100})
                    fixed = all(
                        verdict(prior_met + meets, prior_counted + planned, 0.9) == "missed"
                        for meets in range(planned - misses + 1)
                    )
                    assert settled([miss] * misses) == fixed, (prior_met, prior_counted, planned, misses)
                    if fixed:
                        for counted in range(misses, planned + 1):
                            assert verdict(prior_met + counted - misses, prior_counted + counted, 0.9) == "missed"


REQUEST_S = 0.005 + 9 * 0.005  # ten tokens at ttft_ms=5, itl_ms=5
END_COST_S = 0.02  # the pass's and the search's own work from the last token to the end


def test_a_search_out_of_time_closes_its_open_window_with_what_it_counted_and_stops(tmp_path):
    """capacity.max_search_s of 0.8 s against windows of 0.3 s and 200 requests of about 55 ms at
    c=2 (5.5 s): the first window closes at the deadline with the requests it counted, every one
    of them finished, too few to be met, the probe gets no second window, and the search ends
    there, out_of_time:
    past its budget (or past its window's seconds, where a slow start opened the window late) by
    no more than the send that closes the window and the hold, one request each (50 ms by the
    schedule, and the waits of its ten tokens, in the server and in the client, measured
    alongside), and its own cost of ending. (10 runs with three busy loops on 2 cores: the end
    came up to 190 ms past the deadline and never more than the probe's worst 40 waits in a row
    over two requests' schedule; idle, at least 35 ms less.)"""
    schedule = Schedule(ttft_ms=5, itl_ms=5, max_num_seqs=8)
    settings = {
        "attainment": 0.9, "window_s": 0.3, "window_requests": 200, "repeats": 3, "start_concurrency": 2,
        "max_concurrency": 4, "max_probes": 4, "tolerance": 0.0, "rate": False, "min_rate": 0.1, "runs": 1,
        "max_search_s": 0.8,
    }  # fmt: skip
    load_settings = {"burstiness": 1.0, "warmup": False, "metrics_interval_s": 0.05, "slo_ms": {"ttft": 1000}}
    pool = [{**row, "api": "completions"} for row in ROWS]
    lines = []
    with ReferenceServer("m", tmp_path / "server.log", schedule) as server, SchedulingJitter() as jitter:
        record = search_capacity(
            server, pool, pool, settings, load_settings, None,
            max_model_len=256, max_num_seqs=None, seed=0, timeout_s=30, progress=lines.append,
        )  # fmt: skip
    search = record["concurrency"]
    (probe,) = search["probes"]
    (one,) = probe["pass_records"]
    assert one["closed_at_deadline"] and 10 <= one["requests"] < 200 and one["met_slo"] == one["requests"], one
    assert probe["decision"] == "undecided" and probe["out_of_time"] and "capacity.max_search_s ran out" in lines[-1]
    # Fewer than 35 counted, all within the SLO: never met under Wilson at 0.9, so no evidence
    # of met: it steers as missed and says so, and no capacity is claimed at c=2.
    assert probe["too_few_to_meet"] and not probe["met"] and "cannot be met by the rule" in lines[-1]
    assert (search["capacity"], search["first_failing"], search["outcome"]) == (None, 2, "out_of_time")
    # The pass started at most search_s less its own duration after the search: its window's
    # seconds were up by then plus its opening and 0.3 s.
    search_s, opened, took = search["search_s"], one["window_s"][0], one["duration_s"]
    due = max(settings["max_search_s"], search_s - took + opened + settings["window_s"])
    late = search_s - due - 2 * REQUEST_S
    assert search["max_search_s"] == 0.8 <= search_s
    assert late < jitter.allowance(END_COST_S, wakes=40), (search_s, due, jitter)
    check_probes([probe], settings, 0.9)


def test_a_window_past_its_deadline_still_lasts_its_seconds(tmp_path):
    """A deadline passed before the window opened: the window still lasts its 0.5 s (an open
    loop's ten latencies are what lets a queue show), then closes with what it counted."""
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=5, itl_ms=5, max_num_seqs=8)) as server:
        supply = RequestSupply(ROWS, load_request, seed=1)
        window = Window(0.5, 200, deadline=time.perf_counter())
        run = windowed(server, supply.take(), window, concurrency=2, arrivals=None)
    assert run.closed_at_deadline and run.window_s >= 0.5 and 10 <= len(run.counted_results) < 200


@pytest.mark.timing  # a pass not stalled must wake under 400 ms late: alone in `make test`
def test_a_pass_whose_client_stalled_is_measured_again_and_a_third_stall_limits_the_probe(tmp_path, monkeypatch):
    """The client's event loop blocked for 0.8 s mid-window (as a client starved of CPU is): the
    pass stalled (a tenth of the 4 s TTFT limit: over 400 ms late) and is measured again, its
    requests uncounted under its pass number; the probe is decided on the pass after it alone.
    Stalled three times, the client was the limit: undecided, never met; so too stalled once
    where the search's time is up, with no time to measure it again."""
    import infbench.capacity.probe as probe_module
    import infbench.serving.window as window_module

    stalls: list[bool] = []  # per pass measured so far: whether it is to stall
    sent = Counter()  # requests sent by the pass measured last
    measure_pass, stream_request = probe_module.measure_pass, window_module.stream_request

    def measured(*args, stall_passes: int, **kwargs):
        stalls.append(len(stalls) < stall_passes)
        sent.clear()
        return measure_pass(*args, **kwargs)

    async def streamed(client, model, request, api):
        sent["requests"] += 1
        if stalls[-1] and sent["requests"] == 12:  # past the ramp of 4 completions, inside the window
            time.sleep(0.8)  # blocks the event loop
        return await stream_request(client, model, request, api)

    monkeypatch.setattr(window_module, "stream_request", streamed)
    schedule = Schedule(ttft_ms=2, itl_ms=1, max_num_seqs=8)
    pool = [{**row, "max_tokens": 4, "api": "completions"} for row in ROWS]
    settings = {"attainment": 0.9, "window_s": 0.2, "window_requests": 40, "repeats": 1}
    load_settings = {"burstiness": 1.0, "metrics_interval_s": 0.05, "slo_ms": {"ttft": 4000}, "warmup": False}
    with ReferenceServer("m", tmp_path / "server.log", schedule) as server:
        results = {}
        for stall_passes, seconds in ((1, None), (3, None), (1, 0.0)):
            stalls.clear()
            monkeypatch.setattr(
                probe_module, "measure_pass", lambda *a, n=stall_passes, **k: measured(*a, stall_passes=n, **k)
            )
            budget = TimeBudget(seconds)
            if seconds is not None:
                budget.start()
            prober = Prober(
                server, pool[:4], pool, settings, load_settings, seed=0, timeout_s=5, budget=budget, progress=print
            )
            results[stall_passes, seconds] = prober.probe("concurrency", 4), prober.requests
    (once, once_rows), (thrice, _), (late, _) = results[1, None], results[3, None], results[1, 0.0]
    assert [p["client_stalled"] for p in once.record["stalled_passes"]] == [True]
    assert once.record["stalled_passes"][0]["client_loop_late_ms"] > 400
    assert [p["pass"] for p in once.record["stalled_passes"] + once.record["pass_records"]] == [1, 2]
    assert once.record["pass_records"][0]["client_stalled"] is False
    assert once.met and once.record["decision"] == "met" and not once.record["client_limited"]
    counted = Counter(row["pass"] for row in once_rows if row["counted"])
    assert counted == {2: once.record["requests"]}  # the stalled pass's requests uncounted
    assert len({row["pass"] for row in once_rows}) == 2  # ... but in the table
    assert len(thrice.record["stalled_passes"]) == 2 and thrice.record["pass_records"][0]["client_stalled"]
    assert [p["pass"] for p in thrice.record["pass_records"]] == [3]
    assert thrice.record["client_limited_by"] == ["stalled"] and thrice.record["decision"] == "undecided"
    assert not thrice.met
    assert late.record["stalled_passes"] == [] and late.record["client_limited_by"] == ["stalled"] and not late.met
