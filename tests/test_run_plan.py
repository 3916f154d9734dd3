"""`make plan`: a windowed pass's expected length from the config and an earlier run's latency
and throughput at the level, worked by hand."""

import copy

import pytest
import yaml
from conftest import REPO

from infbench.core.config import validate_config
from infbench.core.run_plan import pass_seconds, render, serving_plan


def default_config() -> dict:
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    return validate_config(config, REPO / "workflow/schemas/config.schema.yaml", REPO)


def test_a_pass_is_ramp_window_and_hold_and_its_window_is_the_longer_of_time_and_requests():
    # 2 s latency: the ramp and the hold 2 s each; 16 requests at 0.5 req/s take 32 s > 5 s.
    assert pass_seconds(5, 16, 0.5, 2.0) == pytest.approx(2 + 32 + 2)
    assert pass_seconds(5, 16, 10.0, 2.0) == pytest.approx(2 + 5 + 2)
    assert pass_seconds(5, 16, 10.0, 2.0, drain=True) == pytest.approx(2 + 5 + 2 + 2)


def test_the_plan_follows_the_config_and_an_earlier_runs_latencies(tmp_path):
    config = default_config()
    config["load"].update(concurrency=[1, 8], request_rates=[1.0])  # config/full.yaml's levels
    earlier = {
        "levels": [
            {"api": "completions", "mode": "concurrency", "max_concurrency": 1, "request_rate": "inf",
             "request_throughput": 0.4, "median_e2el_ms": 2500.0, "duration": 30.0, "repeats": [{}] * 3}
        ]
    }  # fmt: skip
    plans = {plan.what: plan for plan in serving_plan(config, earlier)}
    assert set(plans) == {"concurrency 1", "concurrency 8", "rate 1.0 req/s"}
    # Ramp, 4 requests a window at 0.4 req/s, hold and drain.
    assert plans["concurrency 1"].expected_s == pytest.approx(2.5 + 4 / 0.4 + 2.5 + 2.5)
    assert plans["concurrency 8"].expected_s is None and plans["concurrency 8"].floor_s == 5
    longer = copy.deepcopy(config)
    longer["load"]["window_requests"] = 32
    assert serving_plan(longer, earlier)[0].expected_s == pytest.approx(2.5 + 32 / 0.4 + 2.5 + 2.5)
    text = render(config, tmp_path / "results", tmp_path / "benchmarks")
    assert "concurrency 1: 3 passes, windows at least 15 s, not measured here yet" in text
    assert "up to 21 passes" in text  # the capacity search: 7 probes of up to 3 windows
