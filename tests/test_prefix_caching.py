"""Prefix caching off and on: the block-exact prediction of cache hits, the checks that hold
the live server to it, the request sets, and the tiny run's study."""

import pytest
from conftest import reference_paired_ratio

from infbench.core.artifacts import read_json, validate
from infbench.serving.prefix_caching import hit_checks
from infbench.serving.prefix_sets import conversation_set, predicted_hits, shared_prefix_set


def test_only_whole_blocks_of_a_shared_prefix_are_predicted_hits():
    system = list(range(100))
    prompts = [system + [1000 + i] * 20 for i in range(3)]
    # Each later prompt shares 100 tokens: 6 whole blocks of 16 (96 tokens), 3 of 32, none of 128.
    assert predicted_hits(prompts, 16)["hit_tokens"] == 2 * 96
    assert predicted_hits(prompts, 32)["shared_blocks"] == 2 * 3
    assert predicted_hits(prompts, 128)["hit_tokens"] == 0
    # A prompt seen whole before still computes its last token: its last block is not a hit.
    assert predicted_hits([list(range(64)), list(range(64))], 16)["hit_tokens"] == 48
    result = predicted_hits(prompts, 16)
    assert result["query_tokens"] == 360 and result["hit_rate"] == pytest.approx(192 / 360)


def rounds(off: list[int], on: list[int]) -> list[dict]:
    return [{"s": {"off": {"hit_tokens": a}, "on": {"hit_tokens": b}}} for a, b in zip(off, on)]


@pytest.mark.parametrize(
    ("off", "on", "statuses"),
    [
        ([0, 0], [96, 96], ("pass", "pass")),
        ([0, 0], [96, 40], ("pass", "warn")),  # requests admitted together missed each other's blocks
        ([0, 0], [96, 128], ("pass", "fail")),  # more than the set can share: a stale cache
        ([16, 0], [96, 96], ("fail", "pass")),  # hits with caching off
    ],
)
def test_hit_checks_fail_beyond_the_prediction_and_with_caching_off(off, on, statuses):
    checks = hit_checks(rounds(off, on), "s", {"hit_tokens": 96, "shared_blocks": 6, "block_size": 16})
    assert tuple(c["status"] for c in checks) == statuses


@pytest.fixture(scope="module")
def prompts(tiny_model):
    from transformers import AutoTokenizer

    from infbench.workload.requests import Prompts

    return Prompts(AutoTokenizer.from_pretrained(tiny_model), "chat")


WORKLOAD = [
    {"messages": [{"role": "user", "content": text}], "max_tokens": 20}
    for text in ("What is a page table?", "Why cache keys and values?", "Name a sorting algorithm.")
]


def test_shared_prefix_groups_take_turns_behind_their_own_system_prompt(prompts):
    built = shared_prefix_set(prompts, WORKLOAD, {"groups": 2, "tokens": 64, "requests": 6}, 512, seed=0)
    systems = [r["messages"][0]["content"] for r in built.requests]
    assert systems[0::2] == [systems[0]] * 3 and systems[1::2] == [systems[1]] * 3 and systems[0] != systems[1]
    assert [r["messages"][1]["content"] for r in built.requests[:3]] == [w["messages"][0]["content"] for w in WORKLOAD]
    validate_rows(built.requests)


def test_every_turn_of_a_conversation_carries_the_earlier_turns(prompts):
    built = conversation_set(prompts, WORKLOAD, {"count": 2, "turns": 3}, 512, seed=0)
    assert [r["id"] for r in built.requests[:3]] == ["conv-0-turn-1", "conv-1-turn-1", "conv-0-turn-2"]
    by_id = {r["id"]: r for r in built.requests}
    for turn in (2, 3):
        earlier, later = by_id[f"conv-0-turn-{turn - 1}"], by_id[f"conv-0-turn-{turn}"]
        assert later["messages"][: len(earlier["messages"])] == earlier["messages"]
        assert later["messages"][len(earlier["messages"])]["role"] == "assistant"
    # Turns that no longer fit end the conversation.
    short = conversation_set(prompts, WORKLOAD, {"count": 2, "turns": 3}, 80, seed=0)
    assert len(short.requests) < len(built.requests)
    assert all(r["prompt_tokens"] + r["max_tokens"] <= 80 for r in short.requests)
    validate_rows(built.requests)


def validate_rows(rows):
    for row in rows:
        validate(row, "workload_request")


def test_the_tiny_runs_prefix_caching_stage(tiny_run):
    study = read_json(tiny_run / "results/tiny/prefix_caching.json")
    validate(study, "prefix_caching")
    assert [r["order"] for r in study["rounds"]] == [["off", "on"], ["on", "off"]]
    assert not [c for c in study["checks"] if c["status"] == "fail"], study["checks"]
    for prefix_set in study["sets"]:
        predicted = prefix_set["predicted"]
        assert predicted["hit_tokens"] > 0, prefix_set["name"]  # the test config's sets share whole blocks
        for record in study["rounds"]:
            passes = record[prefix_set["name"]]
            assert passes["off"]["hit_tokens"] == 0 and 0 < passes["on"]["hit_tokens"] <= predicted["hit_tokens"]
            assert passes["on"]["failed"] == passes["off"]["failed"] == 0
            # The server queried every prompt token of the pass, as the prediction counts them.
            assert passes["on"]["query_tokens"] == predicted["query_tokens"]
    report = (tiny_run / "results/report.html").read_text()
    assert "Prefix caching off and on" in report
    # Gains are on / off, paired by round: recomputed from the rounds themselves.
    for prefix_set in study["sets"]:
        for key, gain in prefix_set["gains"].items():
            on = [record[prefix_set["name"]]["on"][key] for record in study["rounds"]]
            off = [record[prefix_set["name"]]["off"][key] for record in study["rounds"]]
            expected = reference_paired_ratio(on, off)
            assert (gain["ratio"], gain["ci95_low"], gain["ci95_high"]) == pytest.approx(expected, rel=1e-4), key


def test_every_windowed_pass_on_a_caching_server_starts_with_the_cache_emptied(tmp_path):
    """On the reference server with prefix caching (blocks of 4 tokens, a word a token), every
    request of one 9-word prompt hits its 2 whole blocks but the first to reach a cold cache:
    a second pass of it gains 8 (sent - 1) hit tokens where the cache was emptied before it,
    8 sent where a server that cannot empty it kept the first pass's blocks."""
    import httpx

    from infbench.serving.client import LoadRequest
    from infbench.serving.reference_server import ReferenceServer, Schedule
    from infbench.serving.window import Window, measure_pass

    prompt = " ".join(f"w{i}" for i in range(9))
    schedule = Schedule(ttft_ms=1, itl_ms=1, max_num_seqs=8, block_size=4, prefix_caching=True)

    def hits(server) -> float:
        lines = httpx.get(f"{server.base_url}/metrics").text.splitlines()
        return float(next(line for line in lines if line.startswith("vllm:prefix_cache_hits_total")).split()[-1])

    def second_pass_gain(server) -> tuple[float, int]:
        gains = []
        for index in range(2):
            before = hits(server)
            requests = iter([LoadRequest(f"p{index}-{i}", prompt, 9, 2) for i in range(200)])
            measured = measure_pass(
                server, requests, what="a pass", pool=None, fix="-", window=Window(0.05, 10), concurrency=2,
                arrivals=None, seed=0, interval_s=0.05, timeout_s=5, api="completions",
            )  # fmt: skip
            gains.append((hits(server) - before, measured.run.sent))
        return gains[1]

    with ReferenceServer("m", tmp_path / "server.log", schedule) as server:
        assert server.resets_prefix_cache
        gained, sent = second_pass_gain(server)
        assert gained == 8 * (sent - 1)
        server.resets_prefix_cache = False  # as an endpoint that is not ours
        gained, sent = second_pass_gain(server)
        assert gained == 8 * sent
