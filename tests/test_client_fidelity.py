"""The client-fidelity stage: vLLM's benchmark client and ours take turns on one server; the
rounds alternate, their ratios pair by round and the verdicts follow the interval (on planted
rounds), both clients send the same API's requests, and the tiny run's artifact."""

import json
import math

import pytest
from conftest import reference_paired_ratio

from infbench.core.artifacts import read_json, validate
from infbench.serving.client_fidelity import alternate, fidelity_checks, fidelity_ratios


def run_result(throughput, ttft, tokens=512):
    return {
        "completed": 16,
        "total_output_tokens": tokens,
        "output_throughput": throughput,
        "median_ttft_ms": ttft,
        "median_tpot_ms": 60.0,
        "median_itl_ms": 60.0,
        "client_cpu_s": 1.0,
    }


def test_fidelity_rounds_alternate_and_ratios_pair_by_round():
    calls = []

    def client(name, throughput):
        def run():
            calls.append(name)
            return run_result(throughput, 100.0)

        return run

    rounds = alternate(client("ours", 95.0), client("vllm", 100.0), 4, progress=lambda _: None)
    assert calls == ["ours", "vllm", "vllm", "ours", "ours", "vllm", "vllm", "ours"]
    ratios = fidelity_ratios(rounds)
    assert ratios["output_throughput"]["ratio"] == pytest.approx(0.95)
    assert ratios["output_throughput"]["round_ratios"] == pytest.approx([0.95] * 4)


def rounds_with(ours_throughputs, theirs_throughputs, ours_tokens=512):
    return [
        {
            "round": i + 1,
            "order": ["ours", "vllm"],
            "ours": run_result(a, 100.0, ours_tokens),
            "vllm": run_result(b, 100.0),
        }
        for i, (a, b) in enumerate(zip(ours_throughputs, theirs_throughputs))
    ]


@pytest.mark.parametrize(
    ("ours", "theirs", "status"),
    [
        ([99.0, 101.0, 100.0], [100.0, 100.0, 100.0], "pass"),  # within 1 +- 5 %
        ([85.0, 86.0, 84.0], [100.0, 100.0, 100.0], "fail"),  # 0.85, interval wholly below 0.95
        ([90.0, 100.0, 97.0], [100.0, 100.0, 100.0], "warn"),  # the interval crosses 0.95: unresolved
    ],
)
def test_fidelity_verdict_follows_the_interval(ours, theirs, status):
    rounds = rounds_with(ours, theirs)
    checks = {c["name"]: c for c in fidelity_checks(rounds, fidelity_ratios(rounds))}
    assert checks["client_fidelity_output_throughput"]["status"] == status
    assert checks["client_fidelity_median_ttft_ms"]["status"] == "pass"
    assert checks["clients_did_the_same_work"]["status"] == "pass"


def test_a_figure_of_zero_in_a_round_gets_no_ratio_and_a_warning_not_a_crash():
    """A median ITL of 0 ms (a round's chunks in one read) has no ratio: the check warns and
    names the round; the other figures keep theirs."""
    rounds = rounds_with([100.0, 100.0, 100.0], [100.0, 100.0, 100.0])
    rounds[1]["ours"]["median_itl_ms"] = 0.0
    ratios = fidelity_ratios(rounds)
    assert ratios["median_itl_ms"]["ratio"] is None and ratios["median_itl_ms"]["round_ratios"][1] is None
    assert "round 2: ours 0" in ratios["median_itl_ms"]["no_ratio"]
    assert ratios["output_throughput"]["ratio"] == pytest.approx(1.0)
    checks = {c["name"]: c for c in fidelity_checks(rounds, ratios)}
    assert checks["client_fidelity_median_itl_ms"]["status"] == "warn"
    assert "no ratio" in checks["client_fidelity_median_itl_ms"]["detail"]


def test_fidelity_fails_when_the_clients_did_different_work():
    rounds = rounds_with([100.0, 100.0], [100.0, 100.0], ours_tokens=500)
    checks = {c["name"]: c for c in fidelity_checks(rounds, fidelity_ratios(rounds))}
    assert checks["clients_did_the_same_work"]["status"] == "fail"
    assert not math.isnan(checks["client_fidelity_output_throughput"]["value"])


def test_vllms_client_is_run_on_the_same_api_as_ours(tmp_path):
    """Chat workloads compare our chat client with vLLM's openai-chat backend, each sending the
    user turn for the server's template to wrap; completions keep the prompt as it is."""
    from infbench.serving.client import LoadRequest
    from infbench.serving.client_fidelity import vllm_bench_arguments, write_dataset

    templated = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    requests = [LoadRequest("r#0", templated, 12, 8, [{"role": "user", "content": "Hi there"}])]
    common = dict(base_url="http://h:1", served_name="m", tokenizer_dir=tmp_path, dataset=tmp_path / "d.jsonl",
                  count=1, concurrency=1, seed=0, result_dir=tmp_path)  # fmt: skip
    for api, backend, endpoint, prompt in (
        ("chat", "openai-chat", "/v1/chat/completions", "Hi there"),
        ("completions", "openai", "/v1/completions", templated),
    ):
        arguments = vllm_bench_arguments(**common, api=api)
        assert arguments[arguments.index("--backend") + 1] == backend
        assert arguments[arguments.index("--endpoint") + 1] == endpoint
        write_dataset(requests, tmp_path / "d.jsonl", api)
        assert json.loads((tmp_path / "d.jsonl").read_text()) == {"prompt": prompt, "output_tokens": 8}


@pytest.mark.slow
def test_client_fidelity_artifact(tiny_run):
    fidelity = read_json(tiny_run / "results/tiny/client_fidelity.json")
    validate(fidelity, "client_fidelity")
    assert [r["order"] for r in fidelity["rounds"]] == [["ours", "vllm"], ["vllm", "ours"]]
    for record in fidelity["rounds"]:
        # 8 requests of 8 tokens each, from both clients.
        for client in ("ours", "vllm"):
            assert record[client]["completed"] == 8 and record[client]["total_output_tokens"] == 64
    assert set(fidelity["ratios"]) == {"output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms"}
    checks = {c["name"]: c["status"] for c in fidelity["checks"]}
    for metric, ratio in fidelity["ratios"].items():
        ours = [record["ours"][metric] for record in fidelity["rounds"]]
        theirs = [record["vllm"][metric] for record in fidelity["rounds"]]
        if ratio["ratio"] is None:  # a figure of 0 in a round (a median ITL of chunks read together)
            assert not all(a > 0 and b > 0 for a, b in zip(ours, theirs)), metric
            assert checks[f"client_fidelity_{metric}"] == "warn"
            continue
        assert ratio["round_ratios"] == pytest.approx([a / b for a, b in zip(ours, theirs)])
        expected = reference_paired_ratio(ours, theirs)
        assert (ratio["ratio"], ratio["ci95_low"], ratio["ci95_high"]) == pytest.approx(expected, rel=1e-4), metric
    assert checks["clients_did_the_same_work"] == "pass"
    assert "--disable-shuffle" in fidelity["vllm_bench_arguments"]
