"""The SLO capacity search's logic against planted latency curves, and its verdicts."""

from __future__ import annotations

import math
import random
import time
from types import SimpleNamespace

import pytest
from conftest import binomial_cdf_exact

from infbench.capacity.estimate import capacity_estimate, crossing, non_increasing_fit
from infbench.capacity.measure import cost_per_million_output_tokens
from infbench.capacity.probe import WILSON, PassRecord, Rule, verdict
from infbench.capacity.search import (
    Probe,
    SearchResult,
    attainment_rises,
    binding_limit,
    binomial_cdf,
    early_stopping_n,
    early_stopping_table,
    search,
    wilson_interval,
)
from infbench.report.capacity import capacity_text, estimate_text


def fake_server(ttft_ms_at, slo_ttft_ms: float, target: float, requests: int = 200, seed: int = 0):
    """A probe whose requests' TTFTs follow `ttft_ms_at(load)` with 5 % lognormal noise."""
    rng = random.Random(seed)

    def probe(load):
        latencies = [ttft_ms_at(load) * math.exp(rng.gauss(0, 0.05)) for _ in range(requests)]
        met = sum(latency <= slo_ttft_ms for latency in latencies)
        return Probe(load, met / requests >= target, {"attainment": met / requests})

    return probe


def test_the_concurrency_search_finds_the_planted_capacity():
    # TTFT 100 + 40 c ms with 5 % noise: 90 % of requests meet 600 ms up to c = 11
    # (p90 at c = 11 is 540 x 1.066 = 576 ms; at c = 12, 618 ms).
    probe = fake_server(lambda c: 100 + 40 * c, 600, 0.9)
    result = search(probe, start=1, floor=1, ceiling=256, integer=True, max_probes=12)
    assert (result.capacity, result.first_failing, result.converged) == (11, 12, True)
    loads = [p.load for p in result.probes]
    assert loads[:5] == [1, 2, 4, 8, 16]  # bracketing by doubling, then bisection inside [8, 16]
    assert set(loads[5:]) <= set(range(9, 16)) and len(loads) == len(set(loads))
    assert result.to_json()["probes"][0] == {"load": 1, "met": True, "decided": True, "attainment": 1.0}


def test_the_predicted_kv_limit_is_probed_and_one_above_it():
    # The curve breaks right after the KV-limited concurrency of 10 (requests start waiting).
    probe = fake_server(lambda c: 100 if c <= 10 else 5000, 600, 0.9)
    result = search(probe, start=4, floor=1, ceiling=256, integer=True, kv_limit=10)
    assert [p.load for p in result.probes] == [4, 8, 10, 11]
    assert (result.capacity, result.first_failing, result.converged) == (10, 11, True)
    # A predicted limit below the start is where the search starts, not a load it steps over.
    result = search(probe, start=16, floor=1, ceiling=256, integer=True, kv_limit=10)
    assert [p.load for p in result.probes] == [10, 11]


def test_the_rate_search_narrows_to_its_tolerance():
    probe = fake_server(lambda rate: 100 * math.exp(rate), 600, 0.9)  # p90 crosses 600 ms near 1.73 req/s
    result = search(probe, start=0.5, floor=0.05, ceiling=8.0, integer=False, tolerance=0.1, max_probes=12)
    assert result.converged
    assert 1.5 < result.capacity < 1.8 < result.first_failing < 2.0
    assert result.first_failing - result.capacity <= 0.1 * result.capacity


def test_a_first_probe_that_fails_halves_down_to_a_passing_one():
    probe = fake_server(lambda c: 100 + 40 * c, 600, 0.9)
    result = search(probe, start=64, floor=1, ceiling=256, integer=True, max_probes=12)
    assert [p.load for p in result.probes][:4] == [64, 32, 16, 8]
    assert (result.capacity, result.first_failing) == (11, 12)


def test_no_passing_load_and_a_passing_ceiling_are_told_apart_and_neither_is_converged():
    """Converged means both ends of the bracket were probed and decided: a search where nothing
    met the SLO, or the ceiling did, has one end only."""
    nothing = search(lambda c: Probe(c, False), start=4, floor=1, ceiling=64, integer=True)
    assert (nothing.capacity, nothing.first_failing, nothing.outcome, nothing.converged) == (None, 1, "none_met", False)
    everything = search(lambda c: Probe(c, True), start=4, floor=1, ceiling=64, integer=True)
    assert (everything.capacity, everything.first_failing, everything.outcome) == (64, None, "ceiling_met")
    assert not everything.converged and everything.to_json()["converged"] is False
    # The report gives a passing ceiling as a lower bound, never as the capacity itself.
    assert capacity_text("concurrency", everything.to_json()).startswith("at least c=64")
    assert capacity_text("concurrency", nothing.to_json()) == "none"
    # A rate ceiling that met the SLO is a lower bound too: no faster rate was tested.
    rate_text = capacity_text("request_rate", everything.to_json())
    assert rate_text.startswith("at least 64.00 req/s, not tested above")
    cut = search(lambda c: Probe(c, c <= 50), start=1, floor=1, ceiling=256, integer=True, max_probes=4)
    assert len(cut.probes) == 4 and cut.outcome == "unfinished" and cut.capacity == 8
    # Cut short while doubling: a lower bound, never as if max_concurrency had met the SLO.
    assert capacity_text("concurrency", cut.to_json()) == (
        "at least c=8 (the search ran out of capacity.max_probes before a load missed the SLO)"
    )


def test_a_search_out_of_time_starts_no_probe_and_ends_with_the_bracket_it_has():
    """The budget is checked before each probe but the first: a search that would bisect on ends
    at its budget with its bracket, out_of_time, not converged; one decided before it ran out
    keeps its outcome; a first probe runs even with no time at all."""
    clock = {"probes": 0}

    def probe(c):
        clock["probes"] += 1
        return Probe(c, c <= 10)

    def after(n):
        return lambda: clock["probes"] >= n

    settings = {"start": 4, "floor": 1, "ceiling": 64, "integer": True, "max_probes": 8}
    whole = search(probe, **settings)
    assert (whole.capacity, whole.first_failing, whole.outcome, len(whole.probes)) == (10, 11, "bracketed", 6)
    clock["probes"] = 0
    stopped = search(probe, **settings, out_of_time=after(3))  # c=4, 8 and 16: bracketed [8, 16], not bisected
    assert [p.load for p in stopped.probes] == [4, 8, 16]
    assert (stopped.capacity, stopped.first_failing, stopped.outcome) == (8, 16, "out_of_time")
    assert not stopped.converged
    assert capacity_text("concurrency", stopped.to_json()) == (
        "c=8 (capacity.max_search_s ran out before the bracket was decided)"
    )
    clock["probes"] = 0
    doubling = search(probe, **settings, out_of_time=after(2))  # c=4 and 8 met, nothing missed yet
    assert (doubling.capacity, doubling.first_failing, doubling.outcome) == (8, None, "out_of_time")
    assert capacity_text("concurrency", doubling.to_json()) == (
        "at least c=8 (capacity.max_search_s ran out before a load missed the SLO)"
    )
    clock["probes"] = 0
    none_left = search(probe, **settings, out_of_time=lambda: True)
    assert [p.load for p in none_left.probes] == [4] and none_left.outcome == "out_of_time"
    # Decided before the time ran out: bracketed, or nothing met, whatever the clock says after.
    clock["probes"] = 0
    assert search(probe, **settings, out_of_time=after(6)).outcome == "bracketed"
    assert search(lambda c: Probe(c, False), **settings, out_of_time=lambda: True).outcome == "out_of_time"  # c=4 only
    assert search(lambda c: Probe(c, False), **{**settings, "start": 1}, out_of_time=lambda: True).outcome == "none_met"


def test_a_search_measures_its_first_load_and_no_other_once_out_of_time():
    """c=4, then c=8 spends the time: the pending c=16 is never measured, and the search ends
    out_of_time with the two probes it has."""
    calls = []

    def measure(c):
        calls.append(c)
        return Probe(c, c <= 10)

    settings = {"start": 4, "floor": 1, "ceiling": 64, "integer": True, "max_probes": 8}
    result = search(measure, **settings, out_of_time=lambda: len(calls) >= 2)
    assert calls == [4, 8] and (result.capacity, result.outcome) == (8, "out_of_time")
    # Out of time from the start: the first load is measured all the same.
    assert [p.load for p in search(measure, **settings, out_of_time=lambda: True).probes] == [4]
    # Nothing met when the time ran out: the capacity lies below the lowest load missed.
    nothing = search(lambda c: Probe(c, False), **settings, out_of_time=lambda: True)
    assert capacity_text("concurrency", nothing.to_json()) == (
        "below c=4 (capacity.max_search_s ran out before a load met the SLO)"
    )


def probed(load, met, ci):
    return Probe(load, met, {"attainment_ci95": ci})


def test_attainment_that_rises_with_load_beyond_its_intervals_is_named():
    """More load never helps: c=16's interval wholly above c=8's is named; overlapping ones are not."""
    falling = [probed(4, True, [0.9, 1.0]), probed(8, True, [0.85, 0.99]), probed(16, False, [0.5, 0.8])]
    assert attainment_rises(falling) == []
    noisy = [probed(4, True, [0.8, 0.97]), probed(8, True, [0.88, 1.0])]  # rose, but within the intervals
    assert attainment_rises(noisy) == []
    risen = [probed(4, True, [0.9, 1.0]), probed(8, False, [0.4, 0.7]), probed(16, True, [0.75, 0.95])]
    assert attainment_rises(risen) == [[8, 16]]
    assert SearchResult(4, 8, risen, "bracketed").to_json()["attainment_rises"] == [[8, 16]]


def test_wilson_interval_and_the_probes_verdict():
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert verdict(2, 16, 0.9) == "missed"  # 12 % met: [4 %, 36 %] lies below 90 %
    assert verdict(13, 16, 0.9) == "undecided"  # 81 %: [57 %, 93 %] straddles 90 %
    assert verdict(34, 34, 0.9) == "undecided"  # all met, but [0.898, 1]: 34 are too few to clear 0.9
    assert verdict(35, 35, 0.9) == "met"  # [0.901, 1]
    assert verdict(29, 32, 0.9) == "undecided"  # the passing 29/32: [0.76, 0.97]
    assert verdict(35, 35, 0.9, saturated=True) == "missed"  # a server that fell behind misses
    # A probe whose client was the limit is neither met nor missed, unless the server saturated.
    assert verdict(35, 35, 0.9, client_limited=True) == "undecided"
    assert verdict(2, 16, 0.9, client_limited=True) == "undecided"
    assert verdict(35, 35, 0.9, saturated=True, client_limited=True) == "missed"


def planted_pass(*, met_slo=40, requests=40, cpu_s=0.0, behind=False, saturated=False, seconds=10.0, spread=None):
    """A PassRecord of `requests` counted requests, `met_slo` of them within the SLO, whose client
    used `cpu_s` CPU seconds over its `seconds` (`spread`: each of its processes' seconds, the
    workers' then the dispatcher's), fell behind its schedule and whose server saturated as told."""
    from infbench.core.metrics import RequestResult
    from infbench.engines.server_metrics import MetricsSeries
    from infbench.serving.client import StreamedResult
    from infbench.serving.window import MeasuredPass, WindowRun

    results = [StreamedResult(RequestResult(f"r{i}", 4, 4, 0.05, 0.2), "", sent_at=1.0) for i in range(requests)]
    run = WindowRun(results, [True] * requests, 0.0, seconds, seconds, MetricsSeries(), 0.0, False, requests)
    run.client_cpu_s = sum(spread) if spread else cpu_s
    if spread:
        run.processes, run.process_cpu_s = len(spread) - 1, spread
    measured = MeasuredPass(run, True, requests, 0, 0.0, behind=saturated, send_lag_growth_s=seconds if behind else 0.0)
    return PassRecord(measured, met_slo)


def test_a_probes_client_is_the_limit_where_it_fell_behind_or_used_most_of_a_core_and_the_server_kept_up():
    """docs/method.md#client-limited-probes on planted passes: behind and not missed at the load
    it got; or 80 % of a core or more (79 % is not) while the server's queue never grew."""
    from infbench.capacity.probe import client_evidence, client_limits, probe_record

    def limited(*passes):
        met, counted = sum(p.met_slo for p in passes), sum(p.requests for p in passes)
        return client_limits(list(passes), met, counted, 0.9)

    assert limited(planted_pass()) == []
    assert limited(planted_pass(behind=True)) == ["behind"]
    assert limited(planted_pass(behind=True, met_slo=2)) == []  # missed at the lower load it got: the server's
    assert limited(planted_pass(cpu_s=7.9)) == [] and planted_pass(cpu_s=7.9).client_cpu_share == pytest.approx(0.79)
    assert limited(planted_pass(cpu_s=8.0)) == ["busy"]
    assert limited(planted_pass(cpu_s=8.0, met_slo=2)) == ["busy"]  # the latencies are partly the client's own
    assert limited(planted_pass(cpu_s=8.0, saturated=True)) == []  # the server fell behind whatever the client did
    assert limited(planted_pass(), planted_pass(cpu_s=9.0)) == ["busy"]  # any pass
    # Behind but missed, and busy: only the reason that counted is given as evidence.
    both = probe_record([planted_pass(behind=True, cpu_s=8.5, met_slo=2)], 3, 0.9, out_of_time=False)
    assert both["client_limited_by"] == ["busy"] and both["pass_records"][0]["client_behind"]
    assert client_evidence(both).startswith("its busiest process used 85 % of a core, so its own delays are in the")
    # Spread over processes: the busiest decides, not their sum.
    assert limited(planted_pass(spread=[5.0, 5.0, 0.3])) == []
    assert limited(planted_pass(spread=[8.0, 1.0, 0.3])) == ["busy"]
    # The share is over the whole pass (ramp, window and hold), as the CPU time is.
    ramped = planted_pass(cpu_s=6.0)
    ramped.measured.run.opened_s, ramped.measured.run.closed_s, ramped.measured.run.ended_s = 2.0, 8.0, 10.0
    assert ramped.client_cpu_share == pytest.approx(0.6)
    record = probe_record([planted_pass(cpu_s=8.5, met_slo=2)], 3, 0.9, out_of_time=False)
    assert record["client_limited"] and record["decision"] == "undecided"
    assert record["client_cpu_share"] == pytest.approx(0.85) and record["pass_records"][0]["client_behind"] is False
    busy = probe_record([planted_pass(cpu_s=8.5, saturated=True)], 3, 0.9, out_of_time=False)
    assert not busy["client_limited"] and busy["decision"] == "missed"


def test_early_stopping_needs_loadgens_published_request_counts():
    """LoadGen's early stopping (loadgen/early_stopping.cc; loadgen/results.cc, server scenario: a
    run passes with q >= h + t requests) at c = 0.99: p99 with 0, 1 and 10 requests over the
    bound needs 459, 662 and 2,010 requests; t = 0 is its closed form ceil(ln(1 - c) / ln p).
    LoadGen's own log of 10,000 p90 queries (mlcommons/inference, a Jetson-Thor SingleStream
    sample's mlperf_log_summary.txt) reads "Processed at least 64 queries" (n(1)) and "Would
    discard 929 highest latency queries" (t - 1, t the most over the bound that 10,000 allow)."""
    assert [early_stopping_n(t, 0.99, 0.99) for t in (0, 1, 10)] == [459, 662, 2010]
    assert early_stopping_n(0, 0.99, 0.99) == math.ceil(math.log(0.01) / math.log(0.99))
    assert early_stopping_n(1, 0.9, 0.99) == 64
    # n(t) grows with t, so 930 is the most that 10,000 allow where n(930) fits and n(931) does not.
    assert early_stopping_n(930, 0.9, 0.99) <= 10_000 < early_stopping_n(931, 0.9, 0.99)
    # The least n: one request fewer is not enough.
    for t in (0, 1, 10):
        n = early_stopping_n(t, 0.99, 0.99)
        assert binomial_cdf(t, n, 0.01) < 0.01 <= binomial_cdf(t, n - 1, 0.01)
    assert binomial_cdf(1, 2, 0.5) == pytest.approx(0.75) and binomial_cdf(2, 2, 0.5) == 1.0
    # Either tail it sums, the exact value.
    for n, q in ((10, 0.2), (40, 0.9), (459, 0.99), (459, 0.01)):
        for k in range(-1, n + 1):
            assert binomial_cdf(k, n, q) == pytest.approx(binomial_cdf_exact(k, n, q), abs=1e-9), (k, n, q)


def test_the_early_stopping_table_in_the_method_is_the_functions():
    from conftest import REPO

    table = early_stopping_table()
    assert table.splitlines()[2] == "| 0 | 459 | 44 |" and "| 10 | 2,010 | 197 |" in table
    assert table in (REPO / "docs/method.md").read_text()


def test_early_stopping_decides_a_probe_by_loadgens_n_and_misses_it_by_the_mirror_test():
    """Under capacity.decision early_stopping a probe is met where its counted requests reach
    n(t) for its t misses, missed where P[Binomial(n, p) <= met] < 1 - c, else undecided."""
    rule = Rule("early_stopping", 0.99)
    assert verdict(459, 459, 0.99, rule=rule) == "met" and verdict(458, 458, 0.99, rule=rule) == "undecided"
    assert verdict(661, 662, 0.99, rule=rule) == "met" and verdict(660, 661, 0.99, rule=rule) == "undecided"
    assert verdict(2000, 2010, 0.99, rule=rule) == "met" and verdict(1999, 2009, 0.99, rule=rule) == "undecided"
    # At 0.9: 44 all met (Wilson: 35); 35 of 35, met under Wilson, is undecided here.
    assert verdict(44, 44, 0.9, rule=rule) == "met" and verdict(35, 35, 0.9, rule=rule) == "undecided"
    assert verdict(35, 35, 0.9) == "met"  # the default is Wilson's
    # Missed by the mirror test: 30 of 40 met would be seen under 1 % of the time at 0.9.
    assert binomial_cdf_exact(30, 40, 0.9) < 0.01 <= binomial_cdf_exact(31, 40, 0.9)
    assert verdict(30, 40, 0.9, rule=rule) == "missed" and verdict(31, 40, 0.9, rule=rule) == "undecided"
    assert verdict(44, 44, 0.9, saturated=True, rule=rule) == "missed"
    assert verdict(44, 44, 0.9, client_limited=True, rule=rule) == "undecided"
    assert verdict(0, 0, 0.9, rule=rule) == "undecided" and verdict(5, 5, 1.0, rule=rule) == "undecided"
    # Met exactly where LoadGen's odds fall below 1 - c, missed only where met is impossible.
    for n in range(1, 90):
        for met in range(n + 1):
            decision = verdict(met, n, 0.9, rule=rule)
            assert (decision == "met") == (binomial_cdf_exact(n - met, n, 0.1) < 0.01), (met, n)
            assert (decision == "missed") == (binomial_cdf_exact(met, n, 0.9) < 0.01), (met, n)


def test_the_page_says_which_rule_decided_the_probes_and_why():
    from infbench.core.capacity_terms import rule_text

    wilson = rule_text({"name": "wilson", "confidence": 0.95}, 0.9)
    assert "95 % Wilson interval" in wilson and "the default" in wilson and "time budget" in wilson
    assert rule_text(None, 0.9) == wilson  # a capacity.json from before the choice was Wilson's
    early = rule_text({"name": "early_stopping", "confidence": 0.99}, 0.99)
    assert "LoadGen's early-stopping rule" in early and "confidence 0.99" in early and "99 %" in early
    assert "at least 99.9 % of requests" in rule_text({"name": "early_stopping", "confidence": 0.99}, 0.999)


def test_an_undecided_met_rate_reads_at_most_the_missed_rate():
    shaky = {"capacity": 1.0, "first_failing": 2.0, "outcome": "undecided",
             "probes": [{"load": 1.0, "decided": False}, {"load": 2.0, "decided": True}]}  # fmt: skip
    assert capacity_text("request_rate", shaky) == "at most 2.00 req/s, undecided (1.00 req/s was not decided met)"


def test_a_bracket_with_an_undecided_end_is_not_converged():
    """Both ends decided: bracketed. The failing end undecided: the search ends the same way but
    is not converged, and says what to raise."""
    decided = search(lambda c: Probe(c, c <= 8), start=4, floor=1, ceiling=64, integer=True, max_probes=8)
    assert (decided.capacity, decided.first_failing, decided.outcome) == (8, 9, "bracketed")
    shaky = search(lambda c: Probe(c, c <= 8, decided=c != 9), start=4, floor=1, ceiling=64, integer=True, max_probes=8)
    assert (shaky.capacity, shaky.first_failing, shaky.outcome, shaky.converged) == (8, 9, "undecided", False)
    assert shaky.to_json()["probes"][-1]["decided"] is False


def test_an_undecided_end_reads_as_the_bound_its_decided_end_gives_without_an_interval():
    """c=2 undecided (met by its point estimate only, as the slowest machine's 22 of 22) and c=3
    missed: "at most c=2, undecided", not c=2 with an interval; the failing end undecided: at
    least the decided met load; the page's fitted capacity reads the same bound."""
    from infbench.report.capacity import search_rows

    settings = {"start": 2, "floor": 1, "ceiling": 64, "integer": True, "max_probes": 8}
    shaky_met = search(lambda c: Probe(c, c <= 2, decided=c != 2), **settings).to_json()
    assert (shaky_met["capacity"], shaky_met["first_failing"], shaky_met["outcome"]) == (2, 3, "undecided")
    assert capacity_text("concurrency", shaky_met) == "at most c=2, undecided (c=2 was not decided met)"
    shaky_missed = search(lambda c: Probe(c, c <= 8, decided=c != 9), **settings).to_json()
    assert capacity_text("concurrency", shaky_missed) == "at least c=8, undecided above (c=9 was not decided)"
    both = search(lambda c: Probe(c, c <= 8, decided=c not in (8, 9)), **settings).to_json()
    assert capacity_text("concurrency", both) == "undecided between c=8 and c=9 (neither was decided)"
    decided = search(lambda c: Probe(c, c <= 8), **settings).to_json()
    assert capacity_text("concurrency", decided) == "c=8"
    for probe in shaky_met["probes"]:
        probe.update(attainment=1.0, attainment_ci95=[0.9, 1.0])
    shaky_met.update(at_capacity=None, search_s=10, max_search_s=300, binding={"limit": "compute"},
                     estimate={"value": 2, "ci95": [2, 3], "lowest_probe": 2, "highest_probe": 4})  # fmt: skip
    (row,) = search_rows({"concurrency": shaky_met})
    assert row["SLO capacity"] == row["fitted capacity"] == "at most c=2, undecided (c=2 was not decided met)"


def test_the_fitted_curve_is_non_increasing_and_keeps_what_already_is():
    assert non_increasing_fit([1.0, 0.9, 0.5], [10, 10, 10]) == [1.0, 0.9, 0.5]
    # 0.7 then 0.9 is upside down: pooled to their weighted mean, (0.7 x 10 + 0.9 x 30) / 40.
    assert non_increasing_fit([1.0, 0.7, 0.9, 0.2], [10, 10, 30, 10]) == pytest.approx([1.0, 0.85, 0.85, 0.2])
    # Linear between probes: 0.95 at 8 and 0.75 at 16 cross 0.9 a quarter of the way, at 10.
    assert crossing([4, 8, 16], [1.0, 0.95, 0.75], 0.9, integer=True) == 10
    assert crossing([1.0, 2.0], [0.95, 0.85], 0.9, integer=False) == pytest.approx(1.5)
    assert crossing([4, 8], [0.8, 0.5], 0.9, integer=True) == -math.inf  # below the lowest probe
    assert crossing([4, 8], [1.0, 0.95], 0.9, integer=True) == math.inf  # at least the highest


def test_the_capacity_interval_covers_a_planted_crossing_and_narrows_with_more_requests():
    """Attainment falls linearly from 1 at c = 8 to 0.5 at c = 40, so it crosses 0.9 at c = 14.4:
    the estimate from probes of n requests each lies within its interval, and 16 times the
    requests give an interval less than half as wide (it never narrows below the gap between
    the probes it falls between)."""
    truth = {c: 1.0 - (c - 8) / 64 for c in range(8, 34, 2)}  # probes 2 apart: the gap is small

    def estimate(n, seed):
        rng = random.Random(seed)
        probes = [(c, sum(rng.random() < p for _ in range(n)), n) for c, p in truth.items()]
        return capacity_estimate(probes, 0.9, integer=False, seed=seed)

    covered, widths = 0, {}
    for n in (40, 640):
        for seed in range(20):
            result = estimate(n, seed)
            low, high = result["ci95"]
            assert low <= result["value"] <= high
            covered += n == 40 and low <= 14.4 <= high
            widths.setdefault(n, []).append(high - low)
    assert covered >= 17  # 95 % intervals: at least 17 of 20 cover the truth (chance of fewer: 1.6 %)
    assert sorted(widths[640])[10] < 0.5 * sorted(widths[40])[10]
    # All met at c = 8, none at c = 16: the curve between them is not measured, so the interval
    # spans the gap [8, 15] however sure each probe is (a binomial redraw would give [8, 8]).
    gap = capacity_estimate([(8, 40, 40), (16, 0, 40)], 0.9, integer=True)
    assert gap["ci95"][0] <= 8 and gap["ci95"][1] >= 15
    # Every probe met: the capacity is at least the highest probe, and the interval says so.
    ceiling = capacity_estimate([(8, 40, 40), (16, 40, 40)], 0.9, integer=True)
    assert ceiling["value"] == "above" and ceiling["ci95"][1] == "above"
    assert capacity_estimate([], 0.9, integer=True)["value"] is None


def scrapes(*states, preempt_at=None):
    """A pass's /metrics series, one scrape per (running, waiting, usage)."""
    return [
        {
            "t": i * 0.5,
            "vllm:num_requests_running": running,
            "vllm:num_requests_waiting": waiting,
            "vllm:kv_cache_usage_perc": usage,
            "vllm:num_preemptions_total": float(preempt_at is not None and i >= preempt_at),
        }
        for i, (running, waiting, usage) in enumerate(states)
    ]


def probe_with(*series):
    return {"peak_num_requests_running": 8, "pass_records": [{"metrics_series": one} for one in series]}


@pytest.mark.parametrize(
    ("series", "limit"),
    [
        (scrapes(*[(6, 0, 0.5)] * 5, preempt_at=3), "kv_memory"),  # preempted between two scrapes
        (scrapes(*[(6, 3, 0.97)] * 5), "kv_memory"),  # waiting with the cache full
        (scrapes(*[(8, 3, 0.5)] * 5), "max_num_seqs"),  # waiting at the cap
        (scrapes(*[(6, 3, 0.5)] * 5), "scheduler"),  # waiting with room
        (scrapes(*[(6, 0, 0.5)] * 5), "compute"),  # nothing waited
        # The opening burst: 16 arrive at once, one scrape sees them wait, then none do.
        (scrapes((8, 8, 0.3), *[(8, 0, 0.6)] * 19), "compute"),
        # A waiting peak early and a usage peak later never co-occurred: peaks taken apart
        # would read "waited with the cache full"; the scrapes say requests waited with room.
        (scrapes(*[(6, 4, 0.3)] * 4, *[(6, 0, 0.97)] * 4), "scheduler"),
    ],
)
def test_the_binding_limit_is_read_from_scrapes_that_co_occurred(series, limit):
    binding = binding_limit(probe_with(series), kv_full_usage=0.95, max_num_seqs=8)
    assert binding["limit"] == limit, binding
    assert binding_limit({"peak_num_requests_running": None}, kv_full_usage=0.95, max_num_seqs=8)["limit"] == "unknown"


def test_the_preemption_counter_is_compared_within_a_pass_only():
    # Two passes: the counter restarts from the server's total, never a rise across passes.
    first, second = scrapes(*[(6, 0, 0.5)] * 3), scrapes(*[(6, 0, 0.5)] * 3)
    for sample in second:
        sample["vllm:num_preemptions_total"] = 5.0  # earlier probes preempted; none in this pass
    assert binding_limit(probe_with(first, second), kv_full_usage=0.95, max_num_seqs=8)["limit"] == "compute"


def test_cost_per_million_output_tokens():
    # 3.6 per hour at 100 output tokens/s: 360,000 tokens an hour, 10 per million.
    assert cost_per_million_output_tokens(3.6, 100.0) == pytest.approx(10.0)
    assert cost_per_million_output_tokens(None, 100.0) is None
    assert cost_per_million_output_tokens(3.6, None) is None


def test_a_concurrency_tolerance_stops_bisection_early():
    # The SLO breaks above 50 requests in flight; within 25 %, [48, 56] is narrow enough.
    probe = lambda c: Probe(c, c <= 50)  # noqa: E731
    result = search(probe, start=8, floor=1, ceiling=64, integer=True, tolerance=0.25)
    assert [p.load for p in result.probes] == [8, 16, 32, 64, 48, 56]
    assert (result.capacity, result.first_failing, result.converged) == (48, 56, True)


def test_the_default_start_costs_what_the_schema_says_against_8():
    """capacity.start_concurrency's description of its default, 16, at the default search
    settings: against a start of 8 it saves a probe where the capacity is 16 or more, probes
    the same loads where it is between 8 and 16, and adds one below 8, wherever no KV limit
    below max_concurrency is predicted."""
    from pathlib import Path

    from infbench.core.config import load_schema

    schema = load_schema(Path(__file__).parents[1] / "workflow/schemas/config.schema.yaml")
    settings = {key: node.get("default") for key, node in schema["properties"]["capacity"]["properties"].items()}
    assert settings["start_concurrency"] == 16

    def loads(start, capacity, kv_limit):
        probe = lambda c: Probe(c, c <= capacity)  # noqa: E731
        result = search(
            probe, start=start, floor=1, ceiling=settings["max_concurrency"], integer=True,
            tolerance=settings["tolerance"], max_probes=settings["max_probes"], kv_limit=kv_limit,
        )  # fmt: skip
        return [p.load for p in result.probes]

    for kv_limit in (None, settings["max_concurrency"], 331):
        for capacity in range(1, 2 * settings["max_concurrency"]):
            eight, default = loads(8, capacity, kv_limit), loads(16, capacity, kv_limit)
            if capacity >= 16:
                assert len(eight) - len(default) == 1, (capacity, kv_limit)
            elif capacity >= 8:
                assert sorted(eight) == sorted(default), (capacity, kv_limit)
            else:
                assert len(default) - len(eight) == 1, (capacity, kv_limit)


def test_a_fitted_interval_never_contradicts_its_own_decided_probes():
    """c=8 missed (15 of 20: its Wilson interval lies below 0.9) and c=2 undecided (113 of 120):
    the bootstrap's refits draw c=8 above the target often enough that the interval read
    ["below", "above"], above a load that missed. Held to the decided probes it ends below 8;
    likewise an interval that reached c=4 where c=4 missed ends at 3, and a met load bounds
    the low end."""
    from infbench.capacity.measure import fitted_capacity

    def probe(load, met_slo, counted):
        decision = verdict(met_slo, counted, 0.9)
        met = decision == "met" or (decision == "undecided" and met_slo / counted >= 0.9)
        record = {"saturated": False, "met_slo": met_slo, "requests": counted}
        return Probe(load, met, record, decided=decision != "undecided")

    fitted = fitted_capacity([probe(2, 113, 120), probe(8, 15, 20)], 0.9, "concurrency", seed=0)
    assert fitted["value"] == 3 and fitted["ci95"] == ["below", 7]
    fitted = fitted_capacity([probe(4, 32, 40), probe(12, 31, 40)], 0.9, "concurrency", seed=0)
    assert fitted["value"] == "below" and fitted["ci95"] == ["below", 3]
    from infbench.capacity.estimate import within_decided

    assert within_decided(-math.inf, 8, 16, True) == 8 and within_decided(math.inf, 8, 16, True) == 15
    assert within_decided(math.inf, None, 2.5, False) == 2.5 and within_decided(5, 16, 8, True) == 5


def test_the_fitted_capacity_is_written_with_its_interval_or_as_the_bound_it_is():
    fitted = {"value": 44, "ci95": [38, "above"], "lowest_probe": 8, "highest_probe": 64}
    assert estimate_text("concurrency", fitted) == "c=44 [95 % CI c=38 to above c=64]"
    every = {"value": "above", "ci95": ["above", "above"], "lowest_probe": 8, "highest_probe": 64}
    assert estimate_text("concurrency", every) == "at least c=64 (the fit meets the target at every probe)"
    # The bootstrap's low end may lie inside the probed range (the highest probe only just met):
    # it is kept.
    edge = {"value": "above", "ci95": [23, "above"], "lowest_probe": 8, "highest_probe": 32}
    assert (
        estimate_text("concurrency", edge)
        == "at least c=32 (the fit meets the target at every probe; 95 % CI from c=23)"
    )
    # Both ends outside the probes (a single probe that met, a bootstrap that also crossed below it).
    lone = {"value": "above", "ci95": ["below", "above"], "lowest_probe": 8, "highest_probe": 8}
    assert estimate_text("concurrency", lone) == (
        "at least c=8 (the fit meets the target at every probe; 95 % CI from below c=8)"
    )
    rate = {"value": 1.5, "ci95": [1.25, 2.0], "lowest_probe": 1.0, "highest_probe": 4.0}
    assert estimate_text("request_rate", rate) == "1.50 req/s [95 % CI 1.25 req/s to 2.00 req/s]"


def test_the_cap_judged_by_is_the_configs_where_it_sets_one():
    from infbench.engines.settings import server_max_num_seqs

    # Without one, vLLM's own default is read (tests/test_capacity.py, on the tiny run).
    assert server_max_num_seqs({"max_num_seqs": 16}) == {"value": 16, "source": "engine.max_num_seqs"}


def test_the_capacity_checks_warn_naming_each_probe_whose_client_was_the_limit_and_why():
    from infbench.capacity.checks import capacity_checks

    def rate_search(behind=(), busy=()):
        probes = [
            {
                "load": load,
                "client_limited": load in behind or load in busy,
                "client_limited_by": ["behind"] * (load in behind) + ["busy"] * (load in busy),
                "client_cpu_share": 0.9 if load in busy else 0.1,
                "attainment_ci95": [0.9, 1.0],
            }
            for load in (10.0, 40.0)
        ]
        return {"request_rate": {"probes": probes, "capacity": 10.0, "first_failing": 40.0, "converged": True,
                                 "outcome": "bracketed", "attainment_rises": []}}  # fmt: skip

    def kept(artifact):
        checks = capacity_checks(artifact)
        return next(c for c in checks if c["name"] == "request rate search: the client was not the limit")

    assert kept(rate_search())["status"] == "pass"
    behind = kept(rate_search(behind=(40.0,)))
    assert behind["status"] == "warn" and behind["value"] == 1 and "40.00 req/s: it fell behind" in behind["detail"]
    busy = kept(rate_search(busy=(10.0,)))
    assert busy["status"] == "warn" and "10.00 req/s: its busiest process used 90 % of a core" in busy["detail"]


def test_a_failing_load_the_client_could_not_send_is_client_limited_and_left_out_of_the_fit():
    from infbench.capacity.measure import fitted_capacity
    from infbench.capacity.search import search

    def probe(load):  # the server meets every rate; the client cannot send 8 req/s or more
        behind = load >= 8
        record = {"met_slo": 40, "requests": 40, "saturated": False, "attainment_ci95": [0.91, 1.0]}
        return Probe(load, met=not behind, record=record, decided=not behind, client_limited=behind)

    result = search(probe, start=2.0, floor=0.5, ceiling=32.0, integer=False, tolerance=0.5, max_probes=8)
    assert result.outcome == "client_limited" and not result.converged
    assert result.first_failing >= 8 and result.capacity < 8
    fitted = fitted_capacity(result.probes, 0.9, "request_rate", seed=0)
    assert {point["load"] for point in fitted["curve"]} == {p.load for p in result.probes if p.load < 8}
    # Nor does a behind probe count as attainment rising with load: it was offered less.
    from infbench.capacity.search import attainment_rises

    low = Probe(4.0, met=False, record={"attainment_ci95": [0.2, 0.4]})
    high = {"load": 8.0, "met": False, "record": {"attainment_ci95": [0.9, 1.0]}, "decided": False}
    assert attainment_rises([low, Probe(**high)]) == [[4.0, 8.0]]
    assert attainment_rises([low, Probe(**high, client_limited=True)]) == []
    # Read as a lower bound that says where the client limited, true although 16 req/s was probed.
    above = search(probe, start=16.0, floor=0.5, ceiling=32.0, integer=False, tolerance=0.5, max_probes=8)
    assert above.probes[0].load == 16.0 and above.outcome == "client_limited"
    assert capacity_text("request_rate", above.to_json()) == (
        f"at least {above.capacity:.2f} req/s (the client was the limit at {above.first_failing:.2f} req/s, "
        "so the server was not measured there)"
    )
    # At the floor too: not "even the lowest load missed".
    floor = search(probe, start=8.0, floor=8.0, ceiling=32.0, integer=False, tolerance=0.5, max_probes=8)
    assert floor.outcome == "client_limited" and floor.capacity is None


@pytest.mark.slow  # imports vLLM (about 6 s)
def test_without_a_cap_in_the_config_the_servers_is_vllms_own_at_most_its_token_budget():
    from infbench.engines.settings import server_max_num_seqs

    # vLLM 0.32's OpenAI server on a CPU: 128 running requests, at most max_num_batched_tokens.
    assert server_max_num_seqs({})["value"] == 128
    capped = server_max_num_seqs({"max_num_batched_tokens": 64})
    assert capped["value"] == 64 and "capped at max_num_batched_tokens = 64" in capped["source"]


def test_a_passs_peaks_are_its_windows_not_its_opening_bursts():
    from infbench.core.metrics import RequestResult
    from infbench.engines.server_metrics import MetricsSeries
    from infbench.serving.client import StreamedResult
    from infbench.serving.window import MeasuredPass, WindowRun

    running, waiting = "vllm:num_requests_running", "vllm:num_requests_waiting"
    samples = [
        {"t": 0.1, running: 8, waiting: 40},  # the ramp's opening burst
        {"t": 1.5, running: 8, waiting: 3},  # the window, 1 s to 3 s
        {"t": 2.5, running: 6, waiting: 1},
        {"t": 3.5, running: 8, waiting: 12},  # the hold
    ]
    results = [StreamedResult(RequestResult(f"r{i}", 4, 4, 0.05, 0.2), "", sent_at=1.2 + i) for i in range(2)]
    run = WindowRun(results, [True, True], 1.0, 3.0, 3.6, MetricsSeries(samples), 0.0, False, 12)
    record = PassRecord.of(MeasuredPass.of(run, False), {"ttft": 1000}).to_json()
    assert record["peak_num_requests_waiting"] == 3 and record["peak_num_requests_running"] == 8
    run.metrics = MetricsSeries([], available=False)
    assert PassRecord.of(MeasuredPass.of(run, False), {"ttft": 1000}).to_json()["peak_num_requests_waiting"] is None


def too_few_probe(load, met_slo, counted, target=0.9, rule=WILSON):
    """A probe as capacity/probe.py records it: too few counted requests to be met steers as missed."""
    decision = verdict(met_slo, counted, target, rule=rule)
    few = decision == "undecided" and verdict(counted, counted, target, rule=rule) != "met"
    record = {"saturated": False, "met_slo": met_slo, "requests": counted, "too_few_to_meet": few}
    return Probe(load, decision == "met", record, decided=decision != "undecided")


def test_probes_too_few_to_be_met_are_left_out_of_the_fit():
    """Wilson at 0.9: c=4 and c=6 met 40 of 40, c=7 and c=8 only 30 of 30 (too few to be met).
    They say nothing of attainment: the fit is the met probes', so the estimate is not above
    every probe, and a candidate at [6, 7] does not read below a baseline at least c=8."""
    from infbench.capacity.measure import fitted_capacity

    probes = [too_few_probe(4, 40, 40), too_few_probe(6, 40, 40), too_few_probe(7, 30, 30), too_few_probe(8, 30, 30)]
    assert [p.record["too_few_to_meet"] for p in probes] == [False, False, True, True]
    fitted = fitted_capacity(probes, 0.9, "concurrency", seed=0)
    assert {point["load"] for point in fitted["curve"]} == {4, 6}
    from infbench.runs.comparison import HIGHER, LOWER, capacity_bounds, capacity_verdict

    assert capacity_bounds(fitted) == (6, math.inf)  # at least c=6, not at least c=8

    assert capacity_verdict(capacity_bounds(fitted), (6, 7)) not in (LOWER, HIGHER)


def test_a_search_whose_probes_were_all_too_few_claims_no_capacity_and_compares_as_none():
    """Early stopping at 0.99: c=4, 2 and 1 each 400 of 400 met, too few (459 needed). The search
    claims no capacity and is not converged (no load missed), the fit has nothing to read, and
    against a baseline of [2, 3] the run is not "higher"."""
    from infbench.capacity.measure import fitted_capacity
    from infbench.runs.comparison import NO_DIFFERENCE, capacity_verdict, search_bounds

    rule = Rule("early_stopping", 0.99)
    result = search(lambda c: too_few_probe(c, 400, 400, 0.99, rule), start=4, floor=1, ceiling=64, integer=True)
    assert result.capacity is None and not result.converged
    candidate = {**result.to_json(), "estimate": fitted_capacity(result.probes, 0.99, "concurrency", seed=0)}
    baseline = {"capacity": 2, "first_failing": 4, "outcome": "bracketed",
                "estimate": {"value": 2, "ci95": [2, 3], "lowest_probe": 1, "highest_probe": 4}}  # fmt: skip
    assert search_bounds("concurrency", candidate) == (-math.inf, math.inf)  # nothing decided: no bound
    verdict_ = capacity_verdict(search_bounds("concurrency", baseline), search_bounds("concurrency", candidate))
    assert verdict_ == NO_DIFFERENCE


def test_an_undecided_end_compares_as_the_bound_it_gives():
    """At least c=8 (c=9 undecided) is [8, inf); at most c=2 (c=2 undecided, c=3 missed) is
    (-inf, 2]; both undecided: no bound; the fitted interval is not compared."""
    from infbench.runs.comparison import search_bounds

    settings = {"start": 2, "floor": 1, "ceiling": 64, "integer": True, "max_probes": 8}
    narrow = {"value": 5, "ci95": [5, 5], "lowest_probe": 1, "highest_probe": 16}
    shaky_missed = search(lambda c: Probe(c, c <= 8, decided=c != 9), **settings).to_json()
    assert search_bounds("concurrency", {**shaky_missed, "estimate": narrow}) == (8, math.inf)
    shaky_met = search(lambda c: Probe(c, c <= 2, decided=c != 2), **settings).to_json()
    assert search_bounds("concurrency", {**shaky_met, "estimate": narrow}) == (-math.inf, 2)
    both = search(lambda c: Probe(c, c <= 8, decided=c not in (8, 9)), **settings).to_json()
    assert search_bounds("concurrency", {**both, "estimate": narrow}) == (-math.inf, math.inf)


def test_an_undecided_load_at_the_floor_is_undecided_not_none_met():
    """c=1, the floor, 30 of 30 met (too few to be met under Wilson at 0.9): nothing missed, so
    the search is undecided, not "even the lowest load missed", and its fix names
    capacity.window_requests; likewise an undecided met ceiling is not "ceiling_met"."""
    from infbench.capacity.checks import converged

    floor = search(lambda c: too_few_probe(c, 30, 30), start=1, floor=1, ceiling=64, integer=True)
    assert (floor.capacity, floor.first_failing, floor.outcome) == (None, 1, "undecided")
    detail = converged("concurrency", floor.to_json())["detail"]
    assert "even the lowest load missed" not in detail and "capacity.window_requests" in detail
    ceiling = search(lambda c: Probe(c, True, decided=c != 64), start=32, floor=1, ceiling=64, integer=True)
    assert (ceiling.capacity, ceiling.outcome) == (64, "undecided")


def test_a_decided_met_above_a_decided_missed_is_a_rise_under_early_stopping():
    """Early stopping at confidence 0.95 and 0.9: 46 of 56 at c=4 missed, 29 of 29 at c=8 met.
    Their Wilson intervals overlap, but the decisions contradict each other: named a rise."""
    rule = Rule("early_stopping", 0.95)
    assert verdict(46, 56, 0.9, rule=rule) == "missed" and verdict(29, 29, 0.9, rule=rule) == "met"
    low = Probe(4, False, {"attainment_ci95": list(wilson_interval(46, 56))})
    high = Probe(8, True, {"attainment_ci95": list(wilson_interval(29, 29))})
    assert attainment_rises([low, high]) == [[4, 8]]
    assert attainment_rises([low, Probe(8, True, high.record, client_limited=True)]) == []


def test_the_method_gives_each_rules_curtailment_and_too_few_counts():
    """A window of 40 closes once missed whatever follows: 8 misses under Wilson at 0.9; under
    early stopping at confidence 0.99, 10 at 0.9 and 3 at 0.99. Too few to be met: 35, 44, 459."""
    from conftest import REPO

    from infbench.capacity.probe import missed_whatever_follows

    def misses_to_close(target, rule):
        settled = missed_whatever_follows(0, 0, 40, target, {"ttft": 1.0}, rule=rule)
        failed = SimpleNamespace(success=False, ttft=1.0, tpot=None, e2el=1.0)  # a request that missed
        return next(m for m in range(41) if settled([failed] * m))

    early = Rule("early_stopping", 0.99)
    assert [misses_to_close(0.9, WILSON), misses_to_close(0.9, early), misses_to_close(0.99, early)] == [8, 10, 3]
    assert [min(n for n in range(1, 999) if verdict(n, n, t, rule=r) == "met") for t, r in
            ((0.9, WILSON), (0.9, early), (0.99, early))] == [35, 44, 459]  # fmt: skip
    method = " ".join((REPO / "docs/method.md").read_text().split())
    assert "after eight misses" in method and "ends after ten misses at a target of 0.9, three at 0.99" in method
    assert "fewer than 44 at 0.9 and 459 at 0.99" in method and "mirror) test is infbench's own" in method


def test_the_pilot_sets_the_start_only_on_what_it_measured_and_a_start_from_1_keeps_its_probes():
    """search_start (docs/method.md#capacity-search): 1 past NEAR_SLO of the TTFT or TPOT SLO;
    the configured start where the pilot measured nothing or the SLO gives it nothing to
    compare; and a search started at 1 gets the doublings up to the configured start as probes."""
    from infbench.capacity.measure import NEAR_SLO, ServerSearches, search_start
    from infbench.core.metrics import RequestResult

    def prober(tpot_s: float, success: bool = True):
        result = RequestResult("r", 2, 16, ttft=0.001, e2el=0.001 + 15 * tpot_s, success=success)
        return type("Pilot", (), {"pilot": lambda self, n: [result] * n})()

    slo = {"ttft": 1000, "tpot": 100}
    near = search_start(prober(0.06), 16, slo)
    assert (near["load"], near["pilot"]["succeeded"]) == (1, 3) and "60 % of the TPOT SLO" in near["why"]
    assert search_start(prober(0.04), 16, slo)["load"] == 16 and 0.4 < NEAR_SLO
    failed = search_start(prober(0.06, success=False), 16, slo)
    assert failed["load"] == 16 and "measured nothing (0 succeeded)" in failed["why"]

    class Unasked:
        def pilot(self, n):
            raise AssertionError("no pilot where the SLO has no TTFT or TPOT, or the start is 1")

    assert search_start(Unasked(), 16, {"e2el": 500})["pilot"] is None
    assert search_start(Unasked(), 1, slo)["load"] == 1

    settings = {"attainment": 0.9, "window_s": 1, "window_requests": 4, "repeats": 1, "start_concurrency": 16,
                "max_concurrency": 128, "max_probes": 7, "tolerance": 0.0, "max_search_s": 60}  # fmt: skip
    rows = [{"id": "r", "prompt": "p", "prompt_tokens": 2, "max_tokens": 4, "api": "completions"}]
    server = type("Server", (), {"base_url": "http://unused", "served_name": "m", "api_key": None})()
    load = {"burstiness": 1.0, "warmup": False, "metrics_interval_s": 0.05, "slo_ms": slo}
    searches = ServerSearches(server, rows, rows, settings, load, None, max_model_len=64, max_num_seqs=None, seed=0,
                              timeout_s=5)  # fmt: skip
    searches.prober.pilot = prober(0.06).pilot
    assert (searches.concurrency_steps()["start"], searches.concurrency_steps()["max_probes"]) == (1, 7 + 4)
    searches.prober.pilot = prober(0.01).pilot
    assert (searches.concurrency_steps()["start"], searches.concurrency_steps()["max_probes"]) == (16, 7)


def test_a_search_on_a_shared_budget_never_restarts_it():
    """ServerSearches.search starts its own capacity.max_search_s, but a budget shared with
    other servers' searches is theirs too: spent, a search on it measures its first probe only."""
    from infbench.capacity.measure import ServerSearches
    from infbench.capacity.probe import TimeBudget

    settings = {"attainment": 0.9, "window_s": 1, "window_requests": 4, "repeats": 1, "start_concurrency": 2,
                "max_concurrency": 64, "max_probes": 7, "tolerance": 0.0, "max_search_s": 60}  # fmt: skip
    rows = [{"id": "r", "prompt": "p", "prompt_tokens": 2, "max_tokens": 4, "api": "completions"}]
    server = type("Server", (), {"base_url": "http://unused", "served_name": "m", "api_key": None})()
    load = {"burstiness": 1.0, "warmup": False, "metrics_interval_s": 0.05, "slo_ms": {"e2el": 1000}}
    record = {"saturated": False, "client_limited": False, "too_few_to_meet": False, "met_slo": 4, "requests": 4,
              "peak_num_requests_running": 1, "peak_kv_cache_usage": 0.1, "peak_num_requests_waiting": 0}  # fmt: skip

    def searched(budget):
        searches = ServerSearches(server, rows, rows, settings, load, None, max_model_len=64, max_num_seqs=None,
                                  seed=0, timeout_s=5, budget=budget)  # fmt: skip
        searches.prober.probe = lambda mode, load, window=None: Probe(load, True, dict(record))
        return searches.search("concurrency", searches.concurrency_steps())

    spent = TimeBudget(60.0)  # its 60 s began a minute ago, with other servers' searches
    spent.deadline = time.perf_counter() - 1
    assert [p["load"] for p in searched(spent)["probes"]] == [2]
    assert [p["load"] for p in searched(None)["probes"]][:3] == [2, 4, 8]  # its own 60 s
