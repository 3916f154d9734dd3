"""Statistics and metric formulas, checked against values worked out by hand."""

import math

import pytest

from infbench.core.metrics import RequestResult, aggregate, goodput, itl_from_token_times, tpot
from infbench.core.stats import paired_ratio, percentile, ratio_of_means, summarize, t_975


def test_t_quantiles_match_published_values():
    # Two-sided 95 % critical values from NIST/SEMATECH e-Handbook table 1.3.6.7.2 and,
    # between its rows, R's qt(0.975, df): a table lookup would give 2.042 for df = 35.
    published = {1: 12.706, 2: 4.303, 3: 3.182, 9: 2.262, 35: 2.030, 100: 1.984, 1000: 1.962}
    assert {df: round(t_975(df), 3) for df in published} == published
    assert t_975(10**6) == pytest.approx(1.96, abs=3e-4)
    with pytest.raises(ValueError):
        t_975(0)


def test_summary_by_hand():
    s = summarize([10.0, 12.0, 14.0])
    assert s.mean == 12.0 and s.median == 12.0 and s.min == 10.0 and s.max == 14.0
    assert s.std == pytest.approx(2.0)  # sample std: sqrt(((-2)^2 + 0 + 2^2) / 2)
    half = 4.302653 * 2.0 / math.sqrt(3)
    assert (s.ci95_low, s.ci95_high) == pytest.approx((12 - half, 12 + half))


def test_single_value_has_no_interval():
    s = summarize([5.0])
    assert s.mean == 5.0 and math.isnan(s.ci95_low) and math.isnan(s.std)


def test_ratio_of_means_delta_method():
    r = ratio_of_means([20.0, 22.0, 24.0], [10.0, 10.0, 10.0])
    assert r["ratio"] == pytest.approx(2.2)
    se_log = math.sqrt(2.0**2 / (3 * 22.0**2))
    assert r["ci95_high"] == pytest.approx(2.2 * math.exp(4.302653 * se_log))
    assert r["ci95_low"] < 2.2 < r["ci95_high"]
    exact = ratio_of_means([3.0, 3.0], [1.5, 1.5])
    assert exact == {"ratio": 2.0, "ci95_low": 2.0, "ci95_high": 2.0}


def test_percentile_interpolates_linearly_by_hand():
    # Sorted 1, 2, 3, 4, 10 sit at ranks 0..4; the q-th percentile sits at rank q / 100 * 4.
    values = [10, 3, 1, 4, 2]
    assert percentile(values, 50) == 3  # rank 2
    assert percentile(values, 90) == pytest.approx(4 + 0.6 * (10 - 4))  # rank 3.6
    assert percentile(values, 99) == pytest.approx(4 + 0.96 * (10 - 4))  # rank 3.96
    assert percentile(values, 0) == 1 and percentile(values, 100) == 10
    assert math.isnan(percentile([], 50))


def test_tpot_and_itl_definitions():
    assert tpot(e2el=1.0, ttft=0.1, output_tokens=10) == pytest.approx(0.1)
    assert tpot(e2el=1.0, ttft=0.1, output_tokens=1) is None
    ttft, gaps = itl_from_token_times(100.0, [100.5, 100.7, 101.0])
    assert ttft == pytest.approx(0.5) and gaps == pytest.approx([0.2, 0.3])


def test_aggregate_uses_vllm_field_names_and_formulas():
    results = [
        RequestResult("a", prompt_tokens=10, output_tokens=5, ttft=0.2, e2el=1.0, itl=[0.2, 0.2, 0.2, 0.2]),
        RequestResult("b", prompt_tokens=20, output_tokens=1, ttft=0.4, e2el=0.4, itl=[]),
        RequestResult("c", prompt_tokens=30, output_tokens=0, ttft=0, e2el=0, success=False, error="boom"),
    ]
    m = aggregate(results, duration_s=2.0)
    assert (m["completed"], m["failed"]) == (2, 1)
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (30, 6)
    assert m["request_throughput"] == 1.0 and m["output_throughput"] == 3.0 and m["total_token_throughput"] == 18.0
    assert m["mean_ttft_ms"] == pytest.approx(300.0)
    assert m["std_ttft_ms"] == pytest.approx(100.0)  # population std, as vLLM reports
    assert m["mean_tpot_ms"] == pytest.approx(200.0)  # only "a" has more than one token
    assert m["mean_itl_ms"] == pytest.approx(200.0) and m["p99_itl_ms"] == pytest.approx(200.0)
    assert m["mean_e2el_ms"] == pytest.approx(700.0)


def test_goodput_counts_requests_meeting_every_slo():
    results = [
        RequestResult("fast", 10, 11, ttft=0.1, e2el=1.1),  # tpot 100 ms
        RequestResult("slow_first", 10, 11, ttft=0.9, e2el=1.9),  # tpot 100 ms, ttft too slow
        RequestResult("one_token", 10, 1, ttft=0.2, e2el=0.2),  # tpot counts as 0, as in vLLM
    ]
    assert goodput(results, 1.0, {"ttft": 500, "tpot": 150}) == 2.0
    assert goodput(results, 2.0, {"tpot": 50}) == 0.5


def test_paired_ratio_cancels_shared_drift():
    # The machine slows down 20 % per round; each round's pair shares it, the ratio stays 2.
    hf = [10.0, 8.0, 6.4]
    vllm = [20.0 * 1.01, 16.0 * 0.99, 12.8]
    paired = paired_ratio(vllm, hf)
    logs = [math.log(1.01), math.log(0.99), 0.0]
    mean, sd = sum(logs) / 3, math.sqrt(sum((x - sum(logs) / 3) ** 2 for x in logs) / 2)
    assert paired["ratio"] == pytest.approx(2 * math.exp(mean))
    assert paired["ci95_high"] == pytest.approx(2 * math.exp(mean + 4.302653 * sd / math.sqrt(3)))
    # Unpaired, the drift lands in the interval: far wider than the paired one.
    unpaired = ratio_of_means(vllm, hf)
    assert unpaired["ci95_high"] - unpaired["ci95_low"] > 10 * (paired["ci95_high"] - paired["ci95_low"])


def test_log_ratio_degrees_of_freedom_are_welchs():
    """Welch-Satterthwaite on the log scale, rounded down: equal relative spreads of 3 and 3
    samples give 4; a side with no spread leaves the other's n - 1; a noisy side of 3 against
    a steady side of 10 falls to near 2."""
    from infbench.core.stats import log_ratio

    assert log_ratio([9.0, 10.0, 11.0], [18.0, 20.0, 22.0])[2] == 4
    assert log_ratio([20.0, 22.0, 24.0], [10.0, 10.0, 10.0])[2] == 2
    assert log_ratio([1.0, 2.0, 3.0], [10.0 + 0.1 * (i % 2) for i in range(10)])[2] == 2
    # The noisy side the larger: Welch's df rises past min(n) - 1 = 2 toward the noisy side's 9.
    noisy_many = [1.0 + 0.5 * (-1) ** i for i in range(10)]
    assert log_ratio(noisy_many, [10.0, 10.1, 9.9])[2] == 9
    # No spread on either side: the pooled n_a + n_b - 2.
    assert log_ratio([2.0, 2.0, 2.0], [1.0, 1.0])[2] == 3


def test_t_quantiles_and_the_power_of_a_t_test_match_tables_and_simulation():
    """t_upper against printed tables; t_test_power at no shift is the test's own level, at large
    df the normal's (1.96 + 0.8416 standard errors: 80 %), and at df 4 what a seeded simulation
    of the pooled t statistic gives (20,000 draws: within 3 standard errors, 0.009)."""
    import math
    import random

    from infbench.core.stats import shift_for_power, t_test_power, t_upper

    assert t_upper(0.2, 5) == pytest.approx(0.9195, abs=1e-4) and t_upper(0.025, 1) == pytest.approx(12.7062, abs=1e-4)
    assert t_upper(0.005, 10) == pytest.approx(3.1693, abs=1e-4) and t_upper(0.0025, 1) == pytest.approx(
        127.32, abs=0.01
    )
    assert t_test_power(0.0, t_upper(0.025, 4), 4) == pytest.approx(0.025, abs=1e-6)
    assert t_test_power(1.959964 + 0.841621, 1.959964, 10_000) == pytest.approx(0.80, abs=1e-3)
    assert t_test_power(shift_for_power(0.8, t_upper(0.01, 3), 3), t_upper(0.01, 3), 3) == pytest.approx(0.8, abs=1e-5)
    # The 80 % shifts at one and two degrees of freedom, from scipy.stats.nct.
    assert shift_for_power(0.8, t_upper(0.025, 1), 1) == pytest.approx(16.3340, abs=1e-3)
    assert shift_for_power(0.8, t_upper(0.025, 2), 2) == pytest.approx(5.6535, abs=1e-3)
    for power, df in ((1.0, 3), (0.0, 3), (0.8, 0)):
        with pytest.raises(ValueError):
            shift_for_power(power, 2.0, df)
    rng, critical = random.Random(3), t_upper(0.025, 4)
    draws = [
        (rng.gauss(0, 1) + 3.0) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(4)) / 4) for _ in range(20_000)
    ]
    assert sum(t >= critical for t in draws) / len(draws) == pytest.approx(t_test_power(3.0, critical, 4), abs=0.009)
