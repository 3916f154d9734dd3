"""The allocator stage: the simulator (the study's numbers exactly, theory's invariants, random
traces), its analysis on hand-made artifacts with the checks it stores, and on the tiny run."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infbench.kv.allocator import analyse, pool_sizing_check, study_reproduction
from infbench.kv.simulator import (
    FirstFit,
    Strategy,
    TraceRequest,
    held_blocks,
    prefix_sharing_strategies,
    replay,
    reservation,
    slots_in_budget,
    standard_strategies,
    static_capacity,
)

CONTIGUOUS_MAX = Strategy("contiguous_max_model_len", "contiguous", "max_model_len")
PROMPT_PLUS_MAX = Strategy("contiguous_prompt_plus_max_tokens", "contiguous", "max_tokens")
POW2 = Strategy("contiguous_pow2", "contiguous", "pow2")
ORACLE = Strategy("contiguous_oracle", "contiguous", "oracle")


def paged(size, share=False):
    return Strategy(f"paged_{size}", "paged", block_size=size, share_prefix=share)


def test_the_study_is_reproduced_exactly():
    result = study_reproduction(kv_bytes_per_token=46_080, budget_bytes=1 << 30)
    table = result["table"]
    assert (table["contiguous_slots"], table["paged_slots"], table["used_slots"]) == (2560, 544, 519)
    assert round(table["contiguous_utilisation"] * 100, 1) == 20.3
    assert round(table["paged_utilisation"] * 100, 1) == 95.4
    assert (table["contiguous_users"], table["paged_users"], table["ideal_users"]) == (19, 92, 97)
    assert (
        table["slots_saved"] == 2016 and round(table["reduction"], 1) == 4.7 and round(table["users_ratio"], 1) == 4.8
    )
    assert result["matches_study"] is True
    # Admitting requests in order instead of dividing by an integer average:
    assert result["by_admission"]["contiguous_users"] == 19 and result["by_admission"]["paged_users"] == 93


def test_block_128_and_outputs_change_the_picture():
    extensions = {(e["requests"], e["block_size"]): e for e in study_reproduction(46_080, 1 << 30)["extensions"]}
    assert extensions[("prompts only (the study)", 128)]["paged_slots"] == 768  # 128+128+128+256+128
    assert extensions[("with 50 output tokens each", 16)]["used_slots"] == 519 + 5 * 50


def test_pool_sizing_check_follows_vllms_formula():
    facts = {
        "block_size": 128,
        "num_blocks": 364,
        "kv_capacity_tokens": 46_592,
        "max_concurrency_at_max_model_len": 91.0,
        "max_model_len": 512,
    }
    assert pool_sizing_check(23_040, 1 << 30, facts)["status"] == "pass"
    assert pool_sizing_check(46_080, 1 << 30, facts)["status"] == "fail"  # fp32 bytes would give 182 blocks


def test_first_fit_coalesces_and_strands_memory():
    space = FirstFit(100)
    a, b, c = space.allocate(30), space.allocate(30), space.allocate(30)
    assert (a, b, c) == (0, 30, 60) and space.free_total == 10
    space.free(a, 30)
    assert space.allocate(35) is None and space.free_total == 40  # 40 free, but no 35 in one piece
    space.free(b, 30)
    assert space.allocate(55) == 0  # the two holes merged


def test_replay_categories_by_hand():
    # One request, prompt 4, output 4, reserve 16 contiguous: 4 steps storing 5..8 tokens.
    result = replay([TraceRequest(4, 4)], CONTIGUOUS_MAX, capacity_slots=16, max_model_len=16)
    assert result.completed == 1 and result.steps == 4
    assert result.slot_steps == {
        "token_states": 5 + 6 + 7 + 8,
        "reservation": 3 + 2 + 1 + 0,
        "internal_fragmentation": 8 * 4,
        "external_fragmentation": 0,
    }
    paged4 = replay([TraceRequest(4, 4)], paged(4), capacity_slots=16, max_model_len=16)
    assert paged4.slot_steps["token_states"] == 26 and paged4.slot_steps["internal_fragmentation"] == 3 + 2 + 1 + 0


def test_shared_prefix_blocks_are_counted_once():
    trace = [TraceRequest(64 + 8, 8, prefix_group=0, prefix_len=64) for _ in range(10)]
    shared = static_capacity(trace, paged(16, share=True), 16 * 20, 256)
    private = static_capacity(trace, paged(16), 16 * 20, 256)
    assert private == 4  # 80 tokens = 5 blocks each, 20 blocks in all
    assert shared == 16  # 4 shared blocks once, then 1 block (16 own tokens) each


def test_orca_pow2_rounds_the_output_on_top_of_the_prompt():
    # The paper's Orca (Pow2): prompt + next_pow2(output), not next_pow2(prompt + output).
    assert reservation(POW2, TraceRequest(100, 20), 512) == 100 + 32
    assert reservation(POW2, TraceRequest(100, 33), 512) == 100 + 64
    assert reservation(POW2, TraceRequest(100, 64), 512) == 100 + 64
    assert reservation(POW2, TraceRequest(10, 0), 512) == 10
    assert reservation(POW2, TraceRequest(400, 100), 512) == 512  # never past max_model_len
    assert reservation(POW2, TraceRequest(600, 100), 512) == 700  # unless the request itself is longer


traces = st.lists(
    st.builds(
        lambda p, o, extra, arrival: TraceRequest(p, o, o + extra, arrival),
        st.integers(1, 120),
        st.integers(1, 120),
        st.integers(0, 64),
        st.integers(0, 50),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(trace=traces, budget=st.integers(256, 4096))
def test_invariants_on_random_traces(trace, budget):
    max_model_len = 512
    for strategy in standard_strategies([8, 16, 32, 128]):
        slots = slots_in_budget(strategy, budget * 64, 64)
        result = replay(trace, strategy, slots, max_model_len)
        steps = result.slot_steps
        # Every request either completes or could never fit; nothing is lost.
        assert result.completed + result.rejected == len(trace)
        # used <= allocated, and every category is non-negative.
        assert all(value >= 0 for value in steps.values())
        for _, allocated, used, _, _ in result.timeline:
            assert used <= allocated <= slots
        if strategy.kind == "paged":
            # Paged waste is below one block per live sequence at every step.
            assert steps["internal_fragmentation"] <= result.running_steps * (strategy.block_size - 1)
            assert steps["reservation"] == 0 and steps["external_fragmentation"] == 0


@settings(max_examples=60, deadline=None)
@given(trace=traces, budget=st.integers(512, 8192))
def test_capacity_ordering_and_monotonicity(trace, budget):
    max_model_len = 512
    capacity = {
        s.name: static_capacity(trace, s, slots_in_budget(s, budget * 64, 64), max_model_len)
        for s in standard_strategies([8, 16, 32, 128])
    }
    assert (
        capacity["contiguous_max_model_len"]
        <= capacity["contiguous_prompt_plus_max_tokens"]
        <= capacity["contiguous_oracle"]
    )
    assert capacity["contiguous_pow2"] <= capacity["contiguous_oracle"]
    # A finer page never wastes more: each block size divides the next.
    assert capacity["paged_8"] >= capacity["paged_16"] >= capacity["paged_32"] >= capacity["paged_128"]
    # Capacity never decreases as the budget grows.
    for strategy in (CONTIGUOUS_MAX, ORACLE, paged(16), paged(128)):
        counts = [
            static_capacity(trace, strategy, slots_in_budget(strategy, b * 64, 64), max_model_len)
            for b in (budget, budget * 2, budget * 4)
        ]
        assert counts == sorted(counts)


def test_prefix_sharing_never_needs_more_memory():
    rng = random.Random(1)
    trace = [
        TraceRequest(100 + rng.randrange(50), rng.randrange(1, 80), prefix_group=0, prefix_len=100) for _ in range(60)
    ]
    for plain, shared in zip(*[iter(prefix_sharing_strategies([16, 32]))] * 2):
        assert static_capacity(trace, shared, 4096, 512) >= static_capacity(trace, plain, 4096, 512)
        assert replay(trace, shared, 4096, 512).steps <= replay(trace, plain, 4096, 512).steps


def test_allocator_rule_on_the_tiny_run(tiny_run):
    from infbench.core.artifacts import read_json, validate

    analysis = read_json(tiny_run / "results/tiny/allocator.json")
    validate(analysis, "allocator")
    assert analysis["study"]["matches_study"] is True
    check = analysis["pool_sizing_check"]
    assert check["status"] == "pass", check
    engine = read_json(tiny_run / "results/tiny/vllm_offline.json")["engine_facts"]
    assert check["predicted"]["num_blocks"] == engine["num_blocks"]
    assert check["predicted"]["kv_capacity_tokens"] == engine["kv_capacity_tokens"]
    assert {t["name"] for t in analysis["traces"]} == {"workload", "workload_shared_prefix", "sharegpt_like"}


def test_held_blocks_on_demand_and_reserved():
    """On demand a sequence holds the blocks its stored tokens fill; reserving, the blocks of
    prompt + max_tokens from admission; a shared prefix's full blocks apart in both."""
    request = TraceRequest(40, 40)
    reserved = Strategy("paged_16_reserved", "paged", reserve="max_tokens", block_size=16)
    assert [held_blocks(paged(16), request, stored) for stored in (41, 48, 49, 79)] == [3, 3, 4, 5]
    assert {held_blocks(reserved, request, stored) for stored in (41, 48, 49, 79)} == {5}
    shared = TraceRequest(40, 40, prefix_group=0, prefix_len=32)
    assert held_blocks(paged(16, share=True), shared, 41) == 1
    assert held_blocks(Strategy("r", "paged", reserve="max_tokens", block_size=16, share_prefix=True), shared, 41) == 3


def test_replay_admits_by_the_same_rule():
    """A pool of 12 blocks of 16: on demand admits all four 40 + 40-token requests at once (3
    blocks each at admission) and preempts as they grow; reserving, two (5 blocks each)."""
    trace = [TraceRequest(40, 40) for _ in range(4)]
    reserved = Strategy("paged_16_reserved", "paged", reserve="max_tokens", block_size=16)
    on_demand = replay(trace, paged(16), capacity_slots=12 * 16, max_model_len=128)
    reserving = replay(trace, reserved, capacity_slots=12 * 16, max_model_len=128)
    assert (on_demand.peak_running, reserving.peak_running) == (4, 2)
    assert on_demand.preemptions > 0 and reserving.preemptions == 0
    assert on_demand.completed == reserving.completed == 4


def hand_analysis(workload: list[dict], vllm_offline: dict) -> dict:
    """The allocator's analysis of a hand-made workload and vLLM offline artifact, on a model of
    100 bytes per token in float32 and a 100 KiB budget, blocks of 16."""
    return analyse(
        workload=workload,
        vllm_offline=vllm_offline,
        model_facts={"name": "hand", "kv_bytes_per_token": {"float32": 100}},
        dtype="float32",
        budget_bytes=102_400,
        max_model_len=128,
        settings={"block_sizes": [16], "sharegpt_requests": 20, "prefix_share_tokens": 16},
        seed=0,
    )


def test_allocator_replays_natural_output_lengths_not_the_fixed_ones():
    """The timed runs suppress EOS, so their outputs equal max_tokens; the allocator must use
    the lengths vLLM produced when it could stop, or reserving max_tokens would look free."""
    workload = [{"id": f"r{i}", "prompt_tokens": 20, "max_tokens": 64} for i in range(4)]
    vllm_offline = {
        "scenarios": [
            {
                "name": "workload_sequential",
                "requests": [{"request_id": r["id"], "output_tokens": 64} for r in workload],
            }
        ],
        "natural_output_tokens": {"r0": 10, "r1": 20, "r2": 30, "r3": 64},
        "engine_facts": {
            "block_size": 16,
            "num_blocks": 64,
            "kv_capacity_tokens": 1024,
            "max_concurrency_at_max_model_len": 8.0,
            "max_model_len": 128,
        },
    }
    analysis = hand_analysis(workload, vllm_offline)
    trace = next(t for t in analysis["traces"] if t["name"] == "workload")
    assert trace["mean_output"] == pytest.approx(31.0) and trace["mean_max_tokens"] == 64
    utilisation = {s["strategy"]: s["utilisation"] for s in trace["strategies"]}
    assert utilisation["contiguous_prompt_plus_max_tokens"] < utilisation["contiguous_oracle"]
    assert analysis["pool_sizing_check"]["status"] == "pass"  # 102,400 // (100 x 16) = 64 blocks


def test_the_allocator_stores_its_two_checks():
    """allocator.json's checks: vLLM's pool-sizing formula and the study's table reproduced;
    the formula's check fails where vLLM's pool differs from what it predicts."""
    facts = {"block_size": 16, "num_blocks": 64, "kv_capacity_tokens": 1024, "max_concurrency_at_max_model_len": 8.0,
             "max_model_len": 128}  # fmt: skip

    def checks(engine_facts):
        analysis = hand_analysis(
            [{"id": "r0", "prompt_tokens": 20, "max_tokens": 64}],
            {"natural_output_tokens": {"r0": 10}, "engine_facts": engine_facts},
        )
        return {c["name"]: (c["status"], c["value"]) for c in analysis["checks"]}

    assert checks(facts) == {
        "vLLM's pool-sizing formula reproduced": ("pass", 64),
        "study table reproduced": ("pass", None),
    }
    assert checks(facts | {"num_blocks": 65})["vLLM's pool-sizing formula reproduced"] == ("fail", 64)
