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
        # No decode reads memory faster than the machine's best triad.
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
