"""The study's 4.8x on vLLM itself: the tiny run's two servers on the study's 10,000-slot pool,
and the predictions they are held to."""

import pytest


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
    assert paged["kv"]["block_size"] == 32 and paged["kv"]["num_blocks"] == 9216 // 32 + 1
    for server in (contiguous, paged):  # equal pools: the same slots lent besides the null block
        assert (server["kv"]["num_blocks"] - 1) * server["kv"]["block_size"] == 9216
    assert paged["vllm"]["peak_num_requests_waiting"] > 0
    for server in (contiguous, paged):
        assert server["vllm"]["completed"] == server["vllm"]["requests"] == 100
        assert server["vllm"]["prompt_tokens_as_sent"]
        assert all(check["status"] == "pass" for check in server["checks"]), server["checks"]
    # Paged, vLLM's peak is the replay's give or take a request or two (it admits over several steps).
    assert abs(paged["vllm"]["peak_num_requests_running"] - paged["simulator"]["replay_peak_running"]) <= 3
    # The live ratio agrees with the simulator's for the same two pools (its replay for the paged
    # server, vLLM admitting over several steps), within the +-3 requests allowed above.
    predicted = paged["simulator"]["replay_peak_running"] / contiguous["simulator"]["users_at_peak_footprint"]
    assert paging["live_ratio"] == pytest.approx(predicted, abs=3 / contiguous["simulator"]["users_at_peak_footprint"])
    assert paging["study"]["contiguous_users"] == 19 and paging["study"]["paged_users"] == 92


def test_paging_predictions_on_the_study_pool():
    from infbench.kv.paging_live import predict, server_pools, study_trace

    settings = {"pool_tokens": 10_000, "max_model_len": 512, "requests": 100, "output_tokens": 8}
    pools = server_pools(settings, "cpu")
    # Equal pools: 18 lent blocks of 512 are 9,216 slots; 288 of 32 (or 576 of 16) lend as many,
    # and each pool keeps one more block as its null block.
    assert pools == {"contiguous": (512, 19), "paged_32": (32, 289)}
    assert server_pools(settings, "cuda")["paged_16"] == (16, 577)
    # vLLM stores prompt + output - 1 tokens: the last sampled token is never fed back.
    assert [r.final for r in study_trace(settings)[:5]] == [52, 135, 30, 263, 74]
    contiguous = predict(settings, 512, 19)
    assert contiguous["users_at_peak_footprint"] == contiguous["replay_peak_running"] == 18
    assert contiguous["replay_preemptions"] == 0
    # Paged at 32: blocks 2 + 5 + 1 + 9 + 3 = 20 per five requests at their peak, 288 lent: 14 rounds
    # of five (280 blocks), then 2 + 5 + 1 more requests fit (288) and the 9-block one does not.
    paged = predict(settings, 32, 289)
    assert paged["users_at_peak_footprint"] == paged["replay_peak_running"] == 73 and paged["replay_preemptions"] == 7
    assert paged["lent_slots"] == contiguous["lent_slots"] == 9216


def test_the_paging_checks_fail_on_a_wrong_pool_a_burst_not_held_and_a_count_off_the_replay():
    from infbench.kv.paging_live import side_by_side

    predicted = {"usable_blocks": 288, "lent_slots": 9216, "users_at_peak_footprint": 73, "replay_peak_running": 73}
    kv = {"num_blocks": 289, "block_size": 32}
    live = {"requests": 100, "completed": 100, "prompt_tokens_as_sent": True, "peak_num_requests_running": 72,
            "peak_num_requests_waiting": 28, "running_waiting": [[20, 80], [71, 28], [72, 20], [72, 0]]}  # fmt: skip

    def statuses(kv=kv, live=live, target=9216):
        return {c["name"]: c["status"] for c in side_by_side("paged_32", 32, kv, predicted, live, target)["checks"]}

    assert set(statuses().values()) == {"pass"}
    assert statuses(kv={"num_blocks": 312, "block_size": 32})["pool"] == "fail"  # 9,952 slots, not 9,216
    assert statuses(target=9984)["pool"] == "fail"  # the pool asked for is not the contiguous server's
    burst = {**live, "running_waiting": [[20, 80], [71, 28], [72, 0]]}  # one scrape at the limit: not held
    assert statuses(live=burst)["driven_above_limit"] == "fail"
    assert statuses(live={**live, "peak_num_requests_running": 78})["admits_replay_count"] == "fail"
