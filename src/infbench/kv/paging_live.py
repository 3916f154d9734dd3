"""The study's 4.8x tested on vLLM itself. Two servers whose pools hold the study's 10,000
token slots: one whose single block is `max_model_len` (512) tokens, so every request holds
exactly one full-length block from admission to the end, as contiguous reservation does, and
one paged at the smallest block the device supports. Both get more of the study's requests
(its five prompt lengths, cycled, with a short output) than they can hold, all at once; their
/metrics tell how many ran at once, how many waited and how many were preempted.

Three answers side by side for each server:

    study       pool // (allocated slots // 5), prompts only, pages of 16 (19 and 92 users)
    simulator   the same requests on the same pool: requests that fit at their peak footprint
                at once, and the step replay's peak running and preemptions (vLLM admits on a
                request's prompt and preempts the newest when a growing one finds no block)
    vLLM        the peak of `vllm:num_requests_running`, waiting and preemptions

vLLM keeps one block of every pool as its null block (never lent): the contiguous pool of
10,000 // 512 = 19 blocks lends 18, 9,216 token slots, one user fewer than the study's
arithmetic, which has no null block. The paged pool is sized to lend exactly as many slots
(9,216 / 32 + 1 = 289 blocks of 32 on CPU, 577 of 16 on a GPU), so that the two servers differ
in their block alone.
"""

from __future__ import annotations

import asyncio

from infbench.core import study_figures
from infbench.kv.simulator import Strategy, TraceRequest, replay, static_capacity
from infbench.serving.client import LoadRequest, run_level
from infbench.workload.requests import PASSAGE

SMALLEST_BLOCK = {"cpu": 32, "cuda": 16}  # vLLM's CPU attention needs multiples of 32
# The peak of running requests lasts a few engine steps of a run of seconds: scrape /metrics far
# more often than a load level does (load.metrics_interval_s), so that the checks see it.
SCRAPE_INTERVAL_S = 0.02


def lent_slots(settings: dict) -> int:
    """The token slots both pools lend: the contiguous pool's whole blocks, less its null block."""
    reserve = settings["max_model_len"]
    return (settings["pool_tokens"] // reserve - 1) * reserve


def server_pools(settings: dict, device: str) -> dict:
    """{name: (block_size, num_blocks)} of the two servers: each lends lent_slots(settings) token
    slots, plus its null block (max_model_len is a multiple of the paged block: a config check)."""
    reserve, paged = settings["max_model_len"], SMALLEST_BLOCK[device]
    slots = lent_slots(settings)
    return {"contiguous": (reserve, slots // reserve + 1), f"paged_{paged}": (paged, slots // paged + 1)}


def study_trace(settings: dict) -> list[TraceRequest]:
    """The requests sent: the study's prompt lengths in turn, each with `output_tokens` out.
    vLLM stores the KV of every token but the last one it samples: prompt + output - 1."""
    lengths = study_figures.KV_REQUEST_TOKENS
    count, output = settings["requests"], settings["output_tokens"]
    return [TraceRequest(lengths[i % len(lengths)], output - 1) for i in range(count)]


def study_requests(tokenizer, settings: dict) -> list[LoadRequest]:
    """The same requests as token ids, so each prompt is exactly the study's length."""
    ids = tokenizer(PASSAGE, add_special_tokens=False)["input_ids"]
    longest = max(study_figures.KV_REQUEST_TOKENS)
    ids = (ids * (longest // len(ids) + 1))[:longest]
    return [
        LoadRequest(f"study-{i}", ids[: request.prompt], request.prompt, settings["output_tokens"])
        for i, request in enumerate(study_trace(settings))
    ]


def predict(settings: dict, block_size: int, num_blocks: int) -> dict:
    """The simulator on the server's pool (num_blocks - 1 lent), requests admitted on their
    prompt and growing one token a step, as vLLM's scheduler does, at most `requests` running."""
    trace = study_trace(settings)
    strategy = Strategy(f"paged_{block_size}", "paged", block_size=block_size)
    slots = (num_blocks - 1) * block_size
    replayed = replay(trace, strategy, slots, settings["max_model_len"], max_running=settings["requests"])
    return {
        "usable_blocks": num_blocks - 1,
        "lent_slots": slots,
        "users_at_peak_footprint": static_capacity(trace[:5], strategy, slots, settings["max_model_len"]),
        "replay_peak_running": replayed.peak_running,
        "replay_preemptions": replayed.preemptions,
    }


def study_arithmetic() -> dict:
    reported = study_figures.KV_REPORTED
    return {
        "contiguous_users": reported["contiguous_users"],
        "paged_users": reported["paged_users"],
        "ratio": reported["paged_users"] / reported["contiguous_users"],
        "page": study_figures.KV_PAGE,
        "pool_slots": study_figures.KV_POOL_SLOTS,
    }


def drive(server, requests: list[LoadRequest], interval_s: float, timeout_s: float) -> dict:
    """Every request sent at once; the server's peaks and preemptions over the run, and each
    scrape's running and waiting counts (taken together, so that a check can ask whether
    requests waited while the server ran at its limit)."""
    run = asyncio.run(
        run_level(
            server.base_url,
            server.served_name,
            requests,
            concurrency=len(requests),
            arrivals=None,
            seed=0,
            interval_s=interval_s,
            timeout_s=timeout_s,
        )
    )
    series = run.metrics
    preemptions = series.first_last("vllm:num_preemptions_total")
    done = [s.result for s in run.results if s.result.success]
    return {
        "requests": len(requests),
        "completed": len(done),
        "prompt_tokens_as_sent": all(r.prompt_tokens == q.prompt_tokens for r, q in zip(done, requests)),
        "duration_s": run.duration_s,
        "samples": len(series.samples),
        "peak_num_requests_running": series.peak("vllm:num_requests_running"),
        "peak_num_requests_waiting": series.peak("vllm:num_requests_waiting"),
        "peak_kv_cache_usage_perc": series.peak("vllm:kv_cache_usage_perc"),
        "preemptions": preemptions[1] - preemptions[0],
        "running_waiting": [
            [sample.get("vllm:num_requests_running", 0.0), sample.get("vllm:num_requests_waiting", 0.0)]
            for sample in series.samples
        ],
    }


# vLLM admits the paged server's requests over several steps (its per-step token budget), so its
# peak running may differ from the replay's, which admits them in one step, by a few requests.
REPLAY_TOLERANCE = 3


# Scrapes that must see requests waiting while the server runs at its limit: more than one, so
# that a moment on the admission ramp does not count as being held there.
HELD_SCRAPES = 2


def side_by_side(name: str, block_size: int, kv: dict, predicted: dict, live: dict, target_slots: int) -> dict:
    """One server's three answers, and the checks that can fail: the pool is what was asked for
    and lends the same slots as the other server's, every request completed as sent, requests
    waited in a scrape where the server ran at its predicted limit (held there, not merely sent
    a burst), and vLLM ran as many requests at once as the simulator admits (exactly with one
    block per request; within REPLAY_TOLERANCE of the step replay when paged)."""
    contiguous = name == "contiguous"
    limit = predicted["users_at_peak_footprint"] if contiguous else predicted["replay_peak_running"]
    tolerance = 0 if contiguous else REPLAY_TOLERANCE
    held = sum(waiting > 0 and running >= limit - tolerance for running, waiting in live["running_waiting"])
    lent = (kv["num_blocks"] - 1) * kv["block_size"]
    running = live["peak_num_requests_running"]
    pool_as_asked = kv["num_blocks"] == predicted["usable_blocks"] + 1 and lent == target_slots
    checks = [
        {
            "name": "pool",
            "status": "pass" if pool_as_asked else "fail",
            "detail": f"the server reports {kv['num_blocks']} blocks of {kv['block_size']} tokens: {lent:,} slots "
            f"lent besides its null block ({target_slots:,} asked for, the same for both servers)",
        },
        {
            "name": "all_completed",
            "status": "pass" if live["completed"] == live["requests"] and live["prompt_tokens_as_sent"] else "fail",
            "detail": f"{live['completed']} of {live['requests']} requests completed, each prompt the study's length",
        },
        {
            "name": "driven_above_limit",
            "status": "pass" if held >= HELD_SCRAPES else "fail",
            "detail": f"{held} of {len(live['running_waiting'])} scrapes saw requests waiting while at least "
            f"{limit - tolerance} ran (the predicted limit {limit}{f' - {tolerance}' if tolerance else ''}; "
            f"at least {HELD_SCRAPES} needed)",
        },
        {
            "name": "admits_pool_count" if contiguous else "admits_replay_count",
            "status": "pass" if abs(running - limit) <= tolerance else "fail",
            "detail": f"peak running {running:.0f}, simulator {limit} ("
            + (f"one block each, {predicted['usable_blocks']} lent)" if contiguous
               else f"the step replay; within {tolerance}: vLLM admits over several steps)"),
        },
    ]  # fmt: skip
    return {"name": name, "block_size": block_size, "kv": kv, "simulator": predicted, "vllm": live, "checks": checks}


def live_ratio(servers: list[dict]) -> float | None:
    contiguous, paged = servers[0]["vllm"]["peak_num_requests_running"], servers[1]["vllm"]["peak_num_requests_running"]
    return paged / contiguous if contiguous else None
