"""SLO capacity, the study's 4.8x on vLLM itself, and MBU: the tiny run's artifacts checked
against what they must hold, and the arithmetic behind them."""

from __future__ import annotations

import pytest
from conftest import tiny_config

# ------------------------------------------------------------------------ the tiny run


def test_a_tight_slo_gives_a_finite_capacity_with_every_probe_recorded(tiny_run):
    from infbench.core.artifacts import read_json, read_jsonl, validate
    from infbench.kv.simulator import Strategy, TraceRequest, static_capacity
    from infbench.serving.client import cycle_requests

    capacity = read_json(tiny_run / "results/tiny/slo_capacity.json")
    validate(capacity, "slo_capacity")
    search = capacity["concurrency"]
    # The test config's TTFT SLO (250 ms) breaks somewhere below 128 requests in flight.
    assert search["capacity"] is not None and search["first_failing"] is not None, search["probes"]
    assert search["capacity"] < search["first_failing"] <= 128
    probes = {p["load"]: p for p in search["probes"]}
    assert len(probes) == len(search["probes"])  # no load probed twice
    assert probes[search["capacity"]]["met"] and not probes[search["first_failing"]]["met"]
    target = capacity["attainment_target"]
    for probe in search["probes"]:
        passes = probe["pass_records"]
        assert probe["passes"] == len(passes) >= 1
        assert probe["requests"] == sum(p["requests"] for p in passes) >= 2 * probe["load"]
        assert probe["met_slo"] == sum(p["met_slo"] for p in passes)
        assert probe["met"] == (probe["attainment"] >= target and not probe["saturated"])
        low, high = probe["attainment_ci95"]
        assert low <= probe["attainment"] <= high
        # A probe stops before its last pass only when its interval already lies below the target.
        if probe["stopped_early"]:
            assert not probe["met"]
    # The search's seed: the workload's requests at their peak footprint on the engine's pool.
    kv = capacity["kv"]
    workload = read_jsonl(tiny_run / "results/tiny/workload.jsonl")
    trace = [TraceRequest(r.prompt_tokens, r.max_tokens) for r in cycle_requests(workload, 8)]
    strategy = Strategy("paged", "paged", block_size=kv["block_size"])
    expected = static_capacity(trace, strategy, (kv["num_blocks"] - 1) * kv["block_size"], 256)
    assert capacity["predicted_kv_concurrency"]["value"] == expected
    assert search["binding"]["limit"] in ("compute", "scheduler", "kv_memory", "max_num_seqs")
    # The rate search, seeded by the closed loop's request rate at its capacity.
    rate = capacity["request_rate"]
    assert rate["probes"][0]["load"] == pytest.approx(
        max(search["at_capacity"]["request_throughput"]["mean"], capacity["settings"]["min_rate"])
    )
    # No rate above the most requests per second a closed-loop probe completed: past the server's
    # throughput a finite open-loop pass is one burst, not a sustained rate.
    highest = max(p["request_throughput"]["mean"] for p in search["probes"])
    assert max(p["load"] for p in rate["probes"]) <= max(highest, rate["probes"][0]["load"]) * (1 + 1e-9)
    # Each rate pass sends twice the concurrency capacity, so that a high rate is no single burst.
    per_pass = max(capacity["settings"]["requests_per_probe"], 2 * search["capacity"])
    assert all(p["requests"] == per_pass for probe in rate["probes"] for p in probe["pass_records"])
    served = search["at_capacity"]["output_throughput"]["mean"]
    assert capacity["cost"]["per_million_output_tokens"] == pytest.approx(2.0 / (served * 3600) * 1e6)


def test_one_block_per_request_admits_exactly_the_pool(tiny_run):
    """The server whose block is max_model_len tokens: each request holds one block, so vLLM runs
    exactly as many at once as its pool lends (num_blocks - 1), as the simulator predicts."""
    from infbench.core.artifacts import read_json, validate

    paging = read_json(tiny_run / "results/tiny/paging_live.json")
    validate(paging, "paging_live")
    contiguous, paged = paging["servers"]
    assert contiguous["kv"]["block_size"] == 512 and contiguous["kv"]["num_blocks"] == 10_000 // 512
    assert contiguous["vllm"]["peak_num_requests_running"] == contiguous["simulator"]["users_at_peak_footprint"] == 18
    assert contiguous["vllm"]["peak_num_requests_waiting"] > 0 and contiguous["vllm"]["preemptions"] == 0
    assert paged["kv"]["block_size"] == 32 and paged["kv"]["num_blocks"] == 10_000 // 32
    assert paged["vllm"]["peak_num_requests_waiting"] > 0
    for server in (contiguous, paged):
        assert server["vllm"]["completed"] == server["vllm"]["requests"] == 100
        assert server["vllm"]["prompt_tokens_as_sent"]
        assert all(check["status"] == "pass" for check in server["checks"]), server["checks"]
    # Paged, vLLM's peak is the replay's give or take a request or two (it admits over several steps).
    assert abs(paged["vllm"]["peak_num_requests_running"] - paged["simulator"]["replay_peak_running"]) <= 3
    assert paging["live_ratio"] == pytest.approx(
        paged["vllm"]["peak_num_requests_running"] / contiguous["vllm"]["peak_num_requests_running"]
    )
    assert paging["study"]["contiguous_users"] == 19 and paging["study"]["paged_users"] == 92


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


def test_tuning_cells_report_their_slo_capacity(tiny_run):
    from infbench.core.artifacts import read_json

    tuning = read_json(tiny_run / "results/tiny/tuning.json")
    cell = tuning["cells"][0]
    assert cell["slo_capacity"]["probes"] and cell["slo_capacity"]["capacity"] is not None
    assert tuning["best_cell"] == 0
    report = (tiny_run / "results/report.html").read_text()
    assert "Best cell: <strong>max_num_seqs = 8</strong>" in report
    for heading in ("How many users within the SLO", "on vLLM itself", "memory bandwidth utilisation"):
        assert heading in report


# --------------------------------------------------------------------- the arithmetic


def test_paging_predictions_on_the_study_pool():
    from infbench.kv.paging_live import predict, server_pools, study_trace

    settings = {"pool_tokens": 10_000, "max_model_len": 512, "requests": 100, "output_tokens": 8}
    pools = server_pools(settings, "cpu")
    assert pools == {"contiguous": (512, 19), "paged_32": (32, 312)}
    assert server_pools(settings, "cuda")["paged_16"] == (16, 625)
    # vLLM stores prompt + output - 1 tokens: the last sampled token is never fed back.
    assert [r.final for r in study_trace(settings)[:5]] == [52, 135, 30, 263, 74]
    contiguous = predict(settings, 512, 19)
    assert contiguous["users_at_peak_footprint"] == contiguous["replay_peak_running"] == 18
    assert contiguous["replay_preemptions"] == 0
    # Paged at 32: blocks 2 + 5 + 1 + 9 + 3 = 20 per five requests at their peak, 311 lent: 15 rounds
    # of five (300 blocks), then 2 + 5 + 1 more requests fit (308) and the 9-block one does not.
    paged = predict(settings, 32, 312)
    assert paged["users_at_peak_footprint"] == 78


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


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("paging_live", {"max_model_len": 500}, "multiple of 32"),
        ("paging_live", {"max_model_len": 256, "output_tokens": 8}, "at least 264"),
        ("paging_live", {"pool_tokens": 1000}, "at least 1024"),
        ("capacity", {"start_concurrency": 128, "max_concurrency": 64}, "start <= max"),
    ],
)
def test_capacity_and_paging_config_errors(tmp_path, section, values, message):
    from infbench.core.config import ConfigError, validate_config

    config = tiny_config(tmp_path)
    config["models"][0]["path"] = str(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    config[section].update(values)
    from conftest import REPO

    with pytest.raises(ConfigError, match=message):
        validate_config(config, REPO / "workflow/schemas/config.schema.yaml", REPO)
