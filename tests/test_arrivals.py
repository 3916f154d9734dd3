"""Open-loop arrival schedules, against vLLM's benchmark definitions and their statistics."""

import statistics

import pytest

from infbench.serving.arrivals import Arrivals, send_offsets


def gaps(offsets):
    return [later - earlier for earlier, later in zip([0.0, *offsets], offsets)]


def test_a_fixed_rate_ends_exactly_at_n_over_rate():
    # Unscaled, 16 Poisson sends at 2 req/s left at 2.2-2.3 req/s; vLLM rescales to N / rate.
    for seed in range(5):
        offsets = send_offsets(16, Arrivals(2.0), seed)
        assert offsets[-1] == pytest.approx(16 / 2.0)
        assert offsets == sorted(offsets) and offsets[0] > 0


def test_burstiness_sets_the_spread_of_the_gaps():
    # Gamma gaps with shape k have a coefficient of variation 1 / sqrt(k).
    for burstiness, expected_cv in ((1.0, 1.0), (0.25, 2.0), (4.0, 0.5)):
        spread = gaps(send_offsets(20_000, Arrivals(5.0, burstiness=burstiness), seed=1))
        cv = statistics.pstdev(spread) / statistics.fmean(spread)
        assert cv == pytest.approx(expected_cv, rel=0.05), burstiness


def test_a_linear_ramp_speeds_up_and_is_not_rescaled():
    offsets = send_offsets(4000, Arrivals(1.0, ramp_to=9.0), seed=2)
    first, last = gaps(offsets)[:400], gaps(offsets)[-400:]
    # Mean gap 1 / rate_i: about 1 / 1.4 s early in the ramp, 1 / 8.6 s at its end.
    assert statistics.fmean(first) == pytest.approx(1 / 1.4, rel=0.15)
    assert statistics.fmean(last) == pytest.approx(1 / 8.6, rel=0.15)
    assert Arrivals(1.0, ramp_to=9.0).rate_of(0, 5) == 1.0 and Arrivals(1.0, ramp_to=9.0).rate_of(4, 5) == 9.0


def test_the_same_seed_gives_the_same_schedule():
    assert send_offsets(10, Arrivals(3.0), 7) == send_offsets(10, Arrivals(3.0), 7)
    assert send_offsets(10, Arrivals(3.0), 7) != send_offsets(10, Arrivals(3.0), 8)
