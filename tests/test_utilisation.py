"""Distance to the hardware: the machine's bandwidth and MBU of every offline scenario and serving
level in the tiny run, and the MBU formula."""

import pytest


def test_mbu_for_every_offline_scenario_and_serving_level(tiny_run):
    from infbench.core.artifacts import read_json, validate

    machine = read_json(tiny_run / "results/machine.json")
    validate(machine, "machine")
    bandwidth = machine["memory_bandwidth"]
    assert 1e9 < bandwidth["median_bytes_per_s"] <= bandwidth["best_bytes_per_s"]
    utilisation = read_json(tiny_run / "results/tiny/utilisation.json")
    validate(utilisation, "utilisation")
    cases = {(row["stage"], row["case"]) for row in utilisation["rows"]}
    for stage in ("hf_baseline", "vllm_offline"):
        scenarios = read_json(tiny_run / f"results/tiny/{stage}.json")["scenarios"]
        assert {(stage, s["name"]) for s in scenarios} <= cases
    levels = read_json(tiny_run / "results/tiny/load.json")["levels"]
    assert sum(stage == "serve" for stage, _ in cases) == len(levels)
    for row in utilisation["rows"]:
        # No decode reads memory faster than the bandwidth it is measured against.
        assert 0 < row["mbu"] < 1, row


def test_mbu_formula():
    from infbench.utilisation.mbu import mbu

    # 1 GB of weights a step at 50 ms a step: 20 GB/s; 100 tok/s x 200 tokens x 1 kB: 20 MB/s.
    figures = mbu(
        weight_bytes=10**9, kv_bytes_per_token=1000, tpot_s=0.05, output_tok_s=100, kv_tokens=200, bandwidth=40e9
    )
    assert figures["bytes_per_s"] == pytest.approx(20e9 + 20e6)
    assert figures["mbu"] == pytest.approx((20e9 + 20e6) / 40e9)
    assert figures["running"] == pytest.approx(5.0)
    assert mbu(weight_bytes=1, kv_bytes_per_token=1, tpot_s=None, output_tok_s=1, kv_tokens=1, bandwidth=1) is None


def test_mbu_takes_the_servers_running_gauge_and_token_weighted_context():
    from infbench.utilisation.mbu import kv_tokens, mbu, serving_rows

    # Running from the gauge (3 requests), not from throughput x TPOT (5): 1 GB + 3 x 200 x 1 kB a step.
    gauge = mbu(
        weight_bytes=10**9,
        kv_bytes_per_token=1000,
        tpot_s=0.05,
        output_tok_s=100,
        kv_tokens=200,
        bandwidth=40e9,
        running=3.0,
    )
    assert gauge["bytes_per_s"] == pytest.approx((1e9 + 3 * 200 * 1000) / 0.05) and gauge["running_from"] == "gauge"
    # A long request decodes for more steps than a short one: its contexts weigh more. Per request,
    # (10 + 1) and (100 + 50); per decode step (o - 1 of them), (1 x 11 + 99 x 150) / 100; a
    # one-token request decodes nothing and weighs nothing.
    requests = [
        {"prompt_tokens": 10, "output_tokens": 2},
        {"prompt_tokens": 100, "output_tokens": 100},
        {"prompt_tokens": 500, "output_tokens": 1},
    ]
    assert kv_tokens(requests) == pytest.approx((1 * 11 + 99 * 150) / 100)
    assert kv_tokens([{"prompt_tokens": 5, "output_tokens": 1}]) is None  # nothing decoded: no MBU, no crash
    # A serving level's gauge is the mean of the scrapes inside each pass at which anything ran,
    # not those before or after it, nor the idle ones.
    series = [{"t": -0.1, "vllm:num_requests_running": 9.0}, {"t": 0.5, "vllm:num_requests_running": 2.0},
              {"t": 1.0, "vllm:num_requests_running": 0.0}, {"t": 1.5, "vllm:num_requests_running": 4.0},
              {"t": 2.5, "vllm:num_requests_running": 9.0}]  # fmt: skip
    request = {"prompt_tokens": 10, "output_tokens": 10, "success": True}
    level = {"request_rate": "inf", "max_concurrency": 4, "burstiness": None, "ramp_end_rate": None,
             "mean_tpot_ms": 50.0, "output_throughput": 100.0,
             "repeats": [{"duration": 2.0, "metrics_series": series, "requests": [request]}]}  # fmt: skip
    (row,) = serving_rows({"levels": [level]}, 10**9, 1000, 40e9)
    assert row["running"] == pytest.approx(3.0) and row["running_from"] == "gauge"


def test_mbu_is_computed_against_the_higher_kernel_and_says_which():
    from infbench.utilisation.mbu import reference_bandwidth

    read = {"method": "read", "best_bytes_per_s": 12e9, "triad": {"method": "triad", "best_bytes_per_s": 15e9}}
    assert reference_bandwidth(read) == (15e9, "triad", {"read": 12e9, "triad": 15e9})
    read["best_bytes_per_s"] = 18e9
    assert reference_bandwidth(read)[:2] == (18e9, "read")
