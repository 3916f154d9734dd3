"""The offline stages' checks and fairness rules on hand-made artifacts: each check must fail
on the case it exists for."""

from infbench.offline.comparison import like_for_like_checks
from infbench.offline.hf_baseline import count_generated
from infbench.offline.timing import TIMING


def offline_run(engine, device="cpu", dtype="float32", cpus=(0, 1), output_tokens=8, timing=None):
    return {
        "engine": engine,
        "engine_report": {"device": device, "dtype": dtype, "cpus": list(cpus)},
        "timing": dict(TIMING, token_times_from=engine) if timing is None else timing,
        "scenarios": [
            {
                "name": "workload_sequential",
                "requests": [{"request_id": "r0", "output_tokens": output_tokens, "max_tokens": 8}],
            }
        ],
    }


def statuses(hf, vllm, device="cpu", dtype="float32"):
    return {c["name"]: c["status"] for c in like_for_like_checks(hf, vllm, device, dtype)}


def test_like_for_like_checks_pass_when_engines_agree_with_the_config():
    assert set(statuses(offline_run("hf"), offline_run("vllm")).values()) == {"pass"}


def test_an_engine_on_another_device_than_configured_fails():
    """The old GPU path: vLLM on cuda, HF left on the CPU."""
    result = statuses(offline_run("hf", device="cpu"), offline_run("vllm", device="cuda"), device="cuda")
    assert result["HF ran on the configured device"] == "fail"
    assert result["vLLM ran on the configured device"] == "pass"
    assert "both engines on the same CPUs" not in result  # only meaningful on CPU


def test_other_cpus_dtype_or_timing_fail():
    result = statuses(offline_run("hf", cpus=(0, 1)), offline_run("vllm", cpus=(1,)))
    assert result["both engines on the same CPUs"] == "fail"
    result = statuses(offline_run("hf"), offline_run("vllm", dtype="bfloat16"))
    assert result["vLLM ran in the configured dtype"] == "fail"
    late_start = dict(TIMING, start="after tokenization")
    result = statuses(offline_run("hf", timing=late_start), offline_run("vllm"))
    assert result["both engines timed on one clock from the same start to the same end"] == "fail"


def test_fewer_tokens_than_asked_fails():
    result = statuses(offline_run("hf", output_tokens=5), offline_run("vllm"))
    assert result["HF output tokens counted = asked"] == "fail"
    assert result["vLLM output tokens counted = asked"] == "pass"


def test_generated_tokens_are_counted_up_to_the_first_stop_or_pad():
    assert count_generated([5, 6, 7], {2}) == 3
    assert count_generated([5, 6, 2, 2], {2}) == 2
    assert count_generated([2, 9], {2, 0}) == 0


def test_a_warmup_runs_whole_until_the_engine_ran_a_group_as_large_and_the_repeats_always_run_whole():
    """The untimed warm-up of each scenario runs its first group: whole the first time the
    engine runs a group of that size and length, cut to WARMUP_MAX_TOKENS once an earlier
    scenario ran one as large; the timed repeats run every group at the lengths asked for."""
    from infbench.core.metrics import RequestResult
    from infbench.offline.scenarios import BatchRun, Scenario, run_scenarios
    from infbench.workload.requests import WARMUP_MAX_TOKENS

    class Recorder:
        name, timing = "fake", {}

        def __init__(self):
            self.calls = []

        def run_batch(self, batch):
            self.calls.append([r["max_tokens"] for r in batch])
            results = [RequestResult(r["id"], 4, r["max_tokens"], 0.01, 0.1) for r in batch]
            return BatchRun(results, [[1] * r["max_tokens"] for r in batch])

    requests = [{"id": f"r{i}", "prompt": "p", "prompt_tokens": 4, "max_tokens": n} for i, n in enumerate([100, 8, 50])]
    batched = Scenario("batched", "static_batch", [requests[:2], requests[2:]])
    longer = Scenario("single", "single", [[dict(requests[0], max_tokens=60)]])
    shorter = Scenario("single", "single", [[dict(requests[0], max_tokens=40)]])
    longer_prompt = Scenario("single", "single", [[dict(requests[0], max_tokens=40, prompt_tokens=9)]])
    runner = Recorder()
    run_scenarios(
        runner, [batched, batched, longer, shorter, longer_prompt], warmup_runs=1, repeats=2, kv_bytes_per_token=1
    )
    timed = [[100, 8], [50]] * 2  # the timed repeats: every group, whole
    assert runner.calls == [
        *([[100, 8]] + timed),  # a pair never run before: warmed whole
        *([[WARMUP_MAX_TOKENS, 8]] + timed),  # a pair of 100 ran: cut
        [60], [60], [60],  # one request of 60: longer than the 50 run alone, warmed whole
        [WARMUP_MAX_TOKENS], [40], [40],  # 40 after 60 and 50 alone: cut
        [40], [40], [40],  # the same output after a longer prompt than any run: whole
    ]  # fmt: skip


def test_the_default_runs_the_studys_single_longest_first_and_its_shorter_warmup_is_cut():
    """benchmark.workload_scenarios off (the default): both engines run the study's single
    request alone at each length, longest first, so that the shorter one's warm-up is covered
    and cut; the agreement check's greedy outputs are then the single's longest run. On, the
    workload's scenarios follow, and the outputs of every request run alone are kept."""
    from infbench.core.metrics import RequestResult
    from infbench.offline.scenarios import BatchRun, build_scenarios, run_scenarios
    from infbench.workload.requests import WARMUP_MAX_TOKENS

    class Recorder:
        name, timing = "fake", {}

        def __init__(self):
            self.calls = []

        def run_batch(self, batch):
            self.calls.append([(r["id"], r["max_tokens"]) for r in batch])
            results = [RequestResult(r["id"], 4, r["max_tokens"], 0.01, 0.1) for r in batch]
            return BatchRun(results, [[len(r["id"])] * r["max_tokens"] for r in batch])

    workload = [
        {"id": "api", "kind": "study_api", "prompt": "p", "prompt_tokens": 7, "max_tokens": 50},
        {"id": "single", "kind": "study_single", "prompt": "p", "prompt_tokens": 11, "max_tokens": 60},
        {"id": "synthetic", "kind": "synthetic", "prompt": "p", "prompt_tokens": 15, "max_tokens": 74},
    ]
    default = build_scenarios(workload, [50, 100], [2], continuous=True, workload_scenarios=False)
    assert [s.name for s in default] == ["study_single_100", "study_single_50"]
    runner = Recorder()
    _, outputs = run_scenarios(runner, default, warmup_runs=1, repeats=2, kv_bytes_per_token=1)
    assert runner.calls == [
        [("single", 100)], [("single", 100)], [("single", 100)],  # the first of its size: warmed whole
        [("single", WARMUP_MAX_TOKENS)], [("single", 50)], [("single", 50)],  # covered by the 100: cut
    ]  # fmt: skip
    assert {rid: len(ids) for rid, ids in outputs.items()} == {"single": 100}

    full = build_scenarios(workload, [50, 100], [2], continuous=True, workload_scenarios=True)
    assert [s.kind for s in full] == ["single", "single", "sequential", "static_batch", "continuous"]
    _, outputs = run_scenarios(Recorder(), full, warmup_runs=1, repeats=2, kv_bytes_per_token=1)
    # The single's longest run (100 tokens alone), not its 60 in the sequential scenario.
    assert {rid: len(ids) for rid, ids in outputs.items()} == {"single": 100, "api": 50, "synthetic": 74}


def test_the_comparison_stores_the_same_weights_verdict_among_its_checks():
    """offline_comparison.json carries the same-weights check beside the like-for-like ones:
    passing where vLLM's greedy tokens are HF's choice, failing where they are far from it."""
    from infbench.core.artifacts import validate
    from infbench.offline.comparison import compare

    def engine_run(engine):
        run = offline_run(engine)
        run["scenarios"][0] |= {"kind": "single", "repeats": [{"output_throughput": 10.0 + i, "mean_e2el_ms": 100.0,
                                                               "mean_ttft_ms": 10.0} for i in range(3)]}  # fmt: skip
        return run | {"model": "m", "settings": {}, "greedy_outputs": {"r0": [1, 2, 3]}}

    def same_weights(gaps):
        comparison = compare(
            [engine_run("hf")], [engine_run("vllm")], {"r0": gaps}, agreement_threshold=0.9, device="cpu",
            dtype="float32",
        )  # fmt: skip
        validate(comparison, "offline_comparison")
        return next(c for c in comparison["checks"] if c["name"] == "HF and vLLM run the same weights")

    assert same_weights([0.0, 0.0, 0.0])["status"] == "pass"
    apart = same_weights([9.0, 9.0, 9.0])
    assert apart["status"] == "fail" and apart["value"] == 0 and "not running the same weights" in apart["detail"]
