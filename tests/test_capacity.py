"""SLO capacity: the tiny run's search checked against what it must hold, and the capacity
stage's config errors."""

from __future__ import annotations

import pytest
from conftest import check_probes, tiny_config

# ------------------------------------------------------------------------ the tiny run


def test_a_tight_slo_gives_a_finite_capacity_with_every_probe_recorded(tiny_run):
    from infbench.core.artifacts import read_json, read_jsonl, validate
    from infbench.kv.simulator import Strategy, TraceRequest, static_capacity
    from infbench.serving.client import load_request
    from infbench.serving.window import RequestSupply

    capacity = read_json(tiny_run / "results/tiny/slo_capacity.json")
    validate(capacity, "slo_capacity")
    settings = capacity["settings"]
    search = capacity["concurrency"]
    # The test config's TPOT SLO (45 ms) breaks somewhere below 128 requests in flight.
    assert search["capacity"] is not None and search["first_failing"] is not None, search["probes"]
    assert search["capacity"] < search["first_failing"] <= 128
    probes = {p["load"]: p for p in search["probes"]}
    assert len(probes) == len(search["probes"])  # no load probed twice
    assert probes[search["capacity"]]["met"] and not probes[search["first_failing"]]["met"]
    target = capacity["attainment_target"]
    check_probes(search["probes"], settings, target)
    # The capacity read from every probe, with its interval around it.
    estimate = search["estimate"]
    low, high = estimate["ci95"]
    if isinstance(estimate["value"], (int, float)):
        assert (low == "below" or low <= estimate["value"]) and (high == "above" or estimate["value"] <= high)
    # The search's seed: the pool's requests, in the order probes draw them, at their peak
    # footprint on the engine's pool.
    kv = capacity["kv"]
    pool = read_jsonl(tiny_run / "results/tiny/request_pool.jsonl")
    rows = RequestSupply(pool, load_request, 0).rows
    trace = [TraceRequest(r["prompt_tokens"], r["max_tokens"]) for r in rows]
    strategy = Strategy("paged", "paged", block_size=kv["block_size"])
    expected = static_capacity(trace, strategy, (kv["num_blocks"] - 1) * kv["block_size"], 256)
    assert capacity["predicted_kv_concurrency"]["value"] == expected
    assert search["binding"]["limit"] in ("compute", "scheduler", "kv_memory", "max_num_seqs")
    # The cap the binding limit is judged by is vLLM's own for its OpenAI server on a CPU (0.32: 128).
    assert capacity["max_num_seqs"] == {
        "value": 128,
        "source": "vLLM's default for its OpenAI server on this device (EngineArgs.get_batch_defaults)",
    }
    page = (tiny_run / "results/report.html").read_text()
    assert "The server ran at most 128 requests at once (max_num_seqs, from vLLM&#39;s default" in page
    # The rate search is off in the test config (tested on reference servers).
    assert "request_rate" not in capacity
    served = search["at_capacity"]["output_throughput"]["mean"]
    assert capacity["cost"]["per_million_output_tokens"] == pytest.approx(2.0 / (served * 3600) * 1e6)


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
