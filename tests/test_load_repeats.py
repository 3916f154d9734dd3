"""A load level over repeats: pooled figures, intervals across repeats, percentiles the sample
supports, and repeats that disagree."""

from dataclasses import replace

import pytest

from infbench.core.metrics import RequestResult, aggregate
from infbench.core.stats import median_interval, percentile_needs
from infbench.engines.server_metrics import MetricsSeries
from infbench.serving.arrivals import Arrivals
from infbench.serving.client import LevelRun, LoadRequest, StreamedResult
from infbench.serving.level_checks import validity_checks
from infbench.serving.sweep import Level, percentile_support, repeats_agree, summarize_level, warmup_requests


def test_median_interval_from_order_statistics_by_hand():
    # n = 16: P(Bin(16, 1/2) < 4) = 697 / 65536, so [x_(4), x_(13)] covers 1 - 2 * 0.0106 = 97.9 %;
    # j = 5 would cover only 92.3 %.
    assert median_interval(range(1, 17)) == (4.0, 13.0)
    assert median_interval([3, 1, 2, 6, 5, 4]) == (1.0, 6.0)  # n = 6: the range, 96.9 %
    assert median_interval(range(5)) is None  # n = 5 cannot reach 95 %


def test_a_percentile_needs_one_value_above_it():
    assert [percentile_needs(q) for q in (50, 90, 95, 99)] == [2, 10, 20, 100]
    pooled = [{"success": True, "ttft": 0.1, "tpot": 0.01, "e2el": 0.2, "itl": [0.01] * 3}] * 48
    support = percentile_support(pooled)
    assert support["ttft"] == {"n": 48, "supported": [50, 90, 95]}  # 48 requests: no p99
    assert support["itl"] == {"n": 144, "supported": [50, 90, 95, 99]}


def fake_run(tpots: list[float], *, duration: float = 2.0, tokens: int = 11) -> LevelRun:
    """A finished pass as the client records it: each request's TTFT 0.1 s and the given TPOT."""
    results = []
    for index, tpot in enumerate(tpots):
        e2el = 0.1 + tpot * (tokens - 1)
        result = RequestResult(f"r{index}", 5, tokens, 0.1 + index * 1e-3, e2el, [tpot] * (tokens - 1))
        results.append(StreamedResult(result, "x" * tokens, 100.0 + index * 0.01, max_tokens=tokens))
    samples = [{"t": -0.01, "vllm:num_requests_running": 0.0}, {"t": 0.5, "vllm:num_requests_running": 4.0}]
    samples += [{"t": 1.0, "vllm:num_requests_running": 4.0}, {"t": duration + 0.01}]
    return LevelRun(results, duration, MetricsSeries(samples), 0.1, [], 100.0)


def level_of(runs):
    return summarize_level(runs, level=Level(4), slo_ms={"ttft": 500}, tokenizer=None, prefix_caching=False)


def test_a_level_pools_its_repeats_and_gives_intervals_across_them():
    runs = [fake_run([0.05 + i * 1e-4 for i in range(16)], duration=d) for d in (2.0, 2.2, 2.4)]
    level = level_of(runs)
    pooled = aggregate([s.result for run in runs for s in run.results], 6.6)
    assert level["completed"] == 48 and level["output_throughput"] == pytest.approx(pooled["output_throughput"])
    across = level["across_repeats"]["output_throughput"]
    per_repeat = [16 * 11 / d for d in (2.0, 2.2, 2.4)]
    assert across["n"] == 3 and across["mean"] == pytest.approx(sum(per_repeat) / 3)
    assert across["ci95_low"] < min(per_repeat) and across["ci95_high"] > max(per_repeat)
    assert len(level["repeats"]) == 3 and level["percentile_support"]["ttft"]["supported"] == [50, 90, 95]
    checks = {c["name"]: c for c in level["checks"]}
    assert checks["repeats_agree"]["status"] == "pass"
    assert "(repeat 1 of 3)" in checks["failed_requests"]["detail"]


def test_repeats_that_disagree_beyond_their_intervals_are_flagged():
    steady = [0.050 + i * 1e-4 for i in range(16)]
    slower = [0.060 + i * 1e-4 for i in range(16)]  # the machine slowed by 20 % between repeats
    level = level_of([fake_run(steady), fake_run(steady), fake_run(slower)])
    verdict = next(c for c in level["checks"] if c["name"] == "repeats_agree")
    assert verdict["status"] == "warn" and "median TPOT" in verdict["detail"]
    # Noise within each repeat's own spread is not flagged.
    jittered = [0.050 + ((i * 7) % 16) * 1e-3 for i in range(16)]
    shifted = [t + 2e-3 for t in jittered]
    assert repeats_agree(level_of([fake_run(jittered), fake_run(shifted)])["repeats"])["status"] == "pass"
    assert repeats_agree(level_of([fake_run(steady)])["repeats"])["status"] == "warn"


def test_a_worst_check_is_kept_with_the_repeat_it_came_from():
    good, failing = fake_run([0.05] * 16), fake_run([0.05] * 16)
    failing.results[3].result.success = False
    level = level_of([good, failing])
    failed = next(c for c in level["checks"] if c["name"] == "failed_requests")
    assert failed["status"] == "fail" and failed["detail"].endswith("(repeat 2 of 2)")


def test_warmup_sends_what_the_level_keeps_in_flight_cut_short():
    requests = [LoadRequest(f"r{i}", "p", 5, 64) for i in range(16)]
    assert [len(warmup_requests(requests, Level(c))) for c in (1, 4, 32)] == [1, 4, 16]
    assert len(warmup_requests(requests, Level(None, Arrivals(2.0)))) == 1
    warm = warmup_requests(requests, Level(4))
    assert {r.max_tokens for r in warm} == {16} and all(r.id.startswith("warmup-") for r in warm)
    assert requests[0].max_tokens == 64  # the measured requests are untouched


def test_an_output_shorter_than_its_max_tokens_fails_the_level():
    """ignore_eos should give every request the tokens it asked for: one short is flagged."""
    run = fake_run([0.05] * 4)
    assert next(c for c in validity_checks(run, None, False) if c["name"] == "short_outputs")["status"] == "pass"
    run.results[1] = replace(run.results[1], max_tokens=12)  # it asked for 12 and got 11
    short = next(c for c in validity_checks(run, None, False) if c["name"] == "short_outputs")
    assert (short["status"], short["value"]) == ("fail", 1)
