"""Measuring a server the pipeline did not start: an OpenAI-compatible server run by this test
with an API key (the reference server, counting prompts with the tiny model's tokenizer and
template, as a user's own deployment would), a ShareGPT file of the user's, and chat requests
through the model's template. The key is read from the variable the config names and is written
nowhere. What is under test is the pipeline's handling of an endpoint, not vLLM."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest
from conftest import copy_checkout, snakemake, tiny_config, write_config

from infbench.core.artifacts import read_json, validate
from infbench.core.checks import STATUS_RANK
from infbench.core.metrics import RequestResult
from infbench.engines.external_endpoint import EndpointError, ExternalEndpoint
from infbench.engines.server_metrics import MetricsSeries
from infbench.serving.client import LevelRun, StreamedResult
from infbench.serving.level_checks import validity_checks
from infbench.serving.reference_server import ReferenceServer, Schedule

KEY_VARIABLE = "INFBENCH_TEST_ENDPOINT_KEY"
SERVED_NAME = "tiny-served-elsewhere"
CONVERSATIONS = [
    ["What does a KV cache hold during decoding?", "The keys and values of every earlier token, per layer."],
    ["Why does paging help a serving engine?", "It hands out memory in blocks as a request grows."],
    ["Name a river in Europe and its sea.", "The Danube, which flows into the Black Sea."],
    ["Hi", "Hello!"],  # under 4 tokens: dropped as vLLM's ShareGPT sampling drops it
    ["Only a question, never answered."],  # no reply: skipped
    # Enough distinct conversations for a level's windowed pass, which never sends one twice.
    *(
        [f"In one sentence, what is {topic} for, case {case}?", f"{topic.capitalize()} serves requests, case {case}."]
        for case in range(6)
        for topic in ("a scheduler", "a tokenizer", "a prefill step", "a decode step", "a block table")
    ),
]


@pytest.fixture(scope="module")
def key() -> str:
    return "sk-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory, key):
    """An endpoint started outside Snakemake that requires `key`. It counts a prompt as its words
    (no tokenizer), not as the pipeline's tokenizer does, so that the counts recorded can be
    told to be the endpoint's own."""
    server = ReferenceServer(
        SERVED_NAME,
        tmp_path_factory.mktemp("endpoint") / "server.log",
        Schedule(ttft_ms=100, itl_ms=10, block_size=128),
        api_key=key,
    )
    with server:
        yield server


def project(tmp_path: Path, tiny_model: Path, base_url: str) -> Path:
    workdir = copy_checkout(tmp_path)
    dataset = workdir / "data" / "my-conversations.json"
    dataset.parent.mkdir()
    roles = ["human", "gpt"]
    dataset.write_text(
        json.dumps(
            [
                {"id": f"c{i}", "conversations": [{"from": roles[j], "value": text} for j, text in enumerate(turns)]}
                for i, turns in enumerate(CONVERSATIONS)
            ]
        )
    )
    config = tiny_config(
        tiny_model,
        hf_baseline={"enabled": False},
        vllm_offline={"enabled": False},
        server={
            "warm_requests": 1,
            "external": {"base_url": f"{base_url}/v1", "model": SERVED_NAME, "api_key_env": KEY_VARIABLE},
        },
        load={"concurrency": [2], "request_rates": [], "ramp": None, "window_requests": 6},
        # The capacity search runs against an endpoint too; a short one, concurrency only, at c = 1.
        capacity={"start_concurrency": 1, "max_concurrency": 1},
        sessions={"capacity": False},  # users in sessions are tested on the reference server (test_sessions.py)
    )
    config["workload"].update(
        api="chat", source="dataset", dataset={"path": "data/my-conversations.json", "num_requests": 100}
    )
    write_config(workdir, config)
    return workdir


def run_with_key(workdir: Path, value: str | None, *args: str, check: bool = True):
    saved = os.environ.pop(KEY_VARIABLE, None)
    if value is not None:
        os.environ[KEY_VARIABLE] = value
    try:
        return snakemake(workdir, "--cores", "2", *args, check=check)
    finally:
        os.environ.pop(KEY_VARIABLE, None)
        if saved is not None:
            os.environ[KEY_VARIABLE] = saved


def test_an_external_endpoint_is_measured_with_the_users_prompts_and_its_key_is_written_nowhere(
    tmp_path, tiny_model, endpoint, key
):
    workdir = project(tmp_path, tiny_model, endpoint.base_url)
    # With a wrong key: the rule stops with one line naming the fix, and writes no serving artifact.
    wrong = run_with_key(workdir, "sk-wrong", "results/tiny/load.json", check=False)
    assert wrong.returncode != 0 and "refused the request (HTTP 401)" in wrong.stderr
    assert not (workdir / "results/tiny/load.json").exists()
    assert "client ceiling" not in (workdir / "logs/serve/tiny.log").read_text()  # refused before the calibration

    run_with_key(workdir, key)
    results = workdir / "results/tiny"
    assert not (results / "client_fidelity.json").exists() and not (results / "tuning.json").exists()
    server, load = read_json(results / "server.json"), read_json(results / "load.json")
    validate(server, "server")
    validate(load, "load")
    assert (
        server["endpoint"] == load["endpoint"] == {"base_url": endpoint.base_url, "model": SERVED_NAME, "metrics": True}
    )
    assert server["command"] is None and server["startup_s"] is None and server["kv"]["block_size"] == 128

    summary = read_json(results / "workload_summary.json")
    source = summary["source"]
    assert source["format"] == "sharegpt" and source["rows_in_source"] == len(CONVERSATIONS)
    assert source["rows_unusable"] == 1 and source["dropped"] == {"too_long": 0, "too_short": 1}
    assert source["kept"] == len(CONVERSATIONS) - 2
    assert summary["provenance"]["inputs"]["workload.dataset"] == source["sha256"]

    # Every level is a chat level; each request records the endpoint's own count of its prompt
    # (here its words), not the workload's token count.
    workload = {r["id"]: r for r in map(json.loads, (results / "workload.jsonl").open())}
    assert {r["api"] for r in workload.values()} == {"chat"}
    assert {level["api"] for level in load["levels"]} == {"chat"}
    differ = 0
    for level in load["levels"]:
        assert level["failed"] == 0 and level["peak_num_requests_running"] >= 1
        for repeat in level["repeats"]:
            for request in repeat["requests"]:
                sent = workload[request["request_id"].split("#")[0]]
                words = len(" ".join(message["content"] for message in sent["messages"]).split())
                assert request["prompt_tokens"] == words
                differ += words != sent["prompt_tokens"]
    assert differ

    report = (workdir / "results/report.html").read_text()
    assert "An external endpoint" in report and "my-conversations.json (sharegpt" in report
    assert "chat template" in report
    # The key is in no artifact, log, report or Snakemake record.
    leaked = [
        path
        for path in workdir.rglob("*")
        if path.is_file() and not path.is_symlink() and key.encode() in path.read_bytes()
    ]
    assert not leaked, leaked


def test_a_missing_key_variable_and_a_wrong_model_name_are_refused(endpoint, key, monkeypatch):
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    with pytest.raises(EndpointError, match=f"export {KEY_VARIABLE}=<your key> before running snakemake"):
        ExternalEndpoint(endpoint.base_url, SERVED_NAME, KEY_VARIABLE)
    monkeypatch.setenv(KEY_VARIABLE, key)
    with pytest.raises(EndpointError, match=f"serves {SERVED_NAME}, not 'other'; set server.external.model"):
        ExternalEndpoint(endpoint.base_url, "other", KEY_VARIABLE).check()
    ExternalEndpoint(f"{endpoint.base_url}/v1/", SERVED_NAME, KEY_VARIABLE).check()  # /v1 and a slash are fine


def test_checks_that_need_metrics_say_not_available_instead_of_failing():
    """An endpoint without vLLM's /metrics: the checks that read it are not available, the others run."""
    result = RequestResult("r#0", 10, 4, 0.1, 0.4, [0.1, 0.1, 0.1])
    run = LevelRun(
        [StreamedResult(result, "a b c d", 0.0, max_tokens=4)], 1.0, MetricsSeries([], available=False), 0.01, [], 0.0
    )
    checks = {c["name"]: c for c in validity_checks(run, None, False)}
    assert checks["metrics_coverage"]["status"] == checks["prefix_cache_hit_rate"]["status"] == "not_available"
    assert checks["failed_requests"]["status"] == checks["short_outputs"]["status"] == "pass"
    assert STATUS_RANK["not_available"] > STATUS_RANK["warn"]
    # With /metrics available and nothing scraped, the same level is flagged.
    run.metrics = MetricsSeries([])
    flagged = {c["name"]: c for c in validity_checks(run, None, False)}
    assert flagged["metrics_coverage"]["status"] == "warn"
