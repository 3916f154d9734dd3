"""The live KV check: each scrape of the server's usage gauge against the blocks the requests in
flight held, under vLLM's on-demand allocation and under its rival, reservation at admission."""

import statistics

from infbench.kv.simulator import blocks_for
from infbench.kv.validation import (
    MAX_OUTSIDE_SHARE,
    allocation_models,
    check_series,
    live_validation,
    predicted_band,
    prefix_blocks,
    request_band,
    request_prefixes,
)

ON_DEMAND = allocation_models(16, prefix_caching=False)["on_demand"]
RESERVATION = allocation_models(16, prefix_caching=False)["reservation"]


def streamed(prompt, output, sent=1.0, ttft=0.5, itl=0.1, id="r-0#0"):
    """A request as the load client records it: `output` tokens, the first `ttft` after `sent`."""
    return {
        "request_id": id,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "sent_s": sent,
        "ttft": ttft,
        "itl": [itl] * (output - 1),
        "success": True,
    }


def scraped(blocks_at, usable=99, every=0.05, until=8.0):
    """A /metrics series whose usage gauge reads `blocks_at(t)` blocks of `usable`."""
    return [
        {"t": i * every, "scrape_s": 0.005, "vllm:kv_cache_usage_perc": blocks_at(i * every) / usable}
        for i in range(int(until / every))
    ]


def on_demand_blocks(request, block_size=16):
    """What vLLM holds: nothing until prefilled, then the blocks of the tokens stored, freed
    with the last token."""
    arrivals = [request["sent_s"] + request["ttft"] + sum(request["itl"][:k]) for k in range(request["output_tokens"])]

    def blocks(t):
        if t < arrivals[0] - 0.02 or t >= arrivals[-1]:
            return 0
        tokens = sum(a <= t for a in arrivals)
        return blocks_for(request["prompt_tokens"] + max(tokens, 1), block_size)

    return blocks


def reserved_blocks(request, block_size=16):
    """What a reserving allocator holds: prompt + max_tokens from admission to the end."""
    end = request["sent_s"] + request["ttft"] + sum(request["itl"])

    def blocks(t):
        inside = request["sent_s"] + request["ttft"] - 0.02 <= t < end
        return blocks_for(request["prompt_tokens"] + request["output_tokens"], block_size) if inside else 0

    return blocks


def one_level(requests, series, **level):
    return {
        "levels": [
            {
                "mode": "concurrency",
                "max_concurrency": 1,
                "request_rate": "inf",
                "preemptions": 0.0,
                **level,
                "repeats": [{"requests": requests, "metrics_series": series}],
            }
        ]
    }


def test_bands_each_request_by_what_the_client_saw():
    # 40-token prompt, 4 tokens out, blocks of 16: sent at 1.0, tokens at 1.5, 1.6, 1.7, 1.8.
    request = streamed(40, 4)
    _, band = request_band(request, ON_DEMAND)
    assert band(0.9)[:2] == (0, 0)
    assert band(1.2)[:2] == (0, 3)  # waiting (none) or prefilled: ceil(41 / 16)
    assert band(1.55)[:2] == (3, 3)  # one token: ceil(40 / 16) .. ceil(42 / 16)
    assert band(1.75)[:2] == (0, 3)  # the engine may already have freed it
    assert band(1.85)[:2] == (0, 0)
    # Reserving, it holds ceil(44 / 16) = 3 as soon as it holds anything: the same here.
    _, rival = request_band(request, RESERVATION)
    assert rival(1.2)[:2] == (0, 3) and rival(1.55)[:2] == (3, 3)
    series = [
        {"t": t / 10, "scrape_s": 0.01, "vllm:kv_cache_usage_perc": (3 if 12 <= t <= 17 else 0) / 99} for t in range(30)
    ]
    changes, band = predicted_band([request], ON_DEMAND)
    assert check_series(series, changes, band, 99, 0.1)["outside"] == 0
    off = check_series(series, changes, lambda t: tuple(b + 2 for b in band(t)), 99, 0.1)
    # Only where the band allows 0 .. 3 blocks (queued, or finishing) does 3 still fit 2 .. 5.
    assert (off["outside"], off["samples"], off["max_blocks_outside"]) == (25, 30, 2)


def test_on_demand_passes_where_reservation_fails_and_back():
    """A 40-token prompt growing by 40 tokens in blocks of 16 holds 3, 4, then 5 blocks; a
    reserving allocator would hold 5 throughout. A server that allocates on demand passes
    on-demand and fails the rival; one that reserved would fail vLLM's model."""
    request = streamed(40, 40)
    kv = {"block_size": 16, "num_blocks": 100}
    growing = live_validation(one_level([request], scraped(on_demand_blocks(request))), kv)
    assert growing["checks"][0]["status"] == "pass", growing["checks"][0]["detail"]
    level = growing["levels"][0]
    assert level["outside_share"] <= MAX_OUTSIDE_SHARE < level["reservation"]["outside_share"]
    assert growing["told_apart"] == level["reservation"]["outside"] > 0
    reserving = live_validation(one_level([request], scraped(reserved_blocks(request))), kv)
    assert reserving["checks"][0]["status"] == "fail", reserving["checks"][0]["detail"]
    assert reserving["levels"][0]["reservation"]["outside_share"] <= MAX_OUTSIDE_SHARE


def test_scrapes_of_an_empty_server_cannot_tell_the_rules_apart():
    """The same request followed by 32 s of an idle server, as between a rate level's requests:
    the idle scrapes fit both rules, so the told-apart share is of the busy samples (a request
    in flight, or blocks held): counted over all, it would fall from 51 % to 6 % and the check
    would say it cannot tell the rules apart. A block read held on an empty server is busy, and
    outside both rules."""
    request = streamed(40, 40)
    kv = {"block_size": 16, "num_blocks": 100}
    short = live_validation(one_level([request], scraped(on_demand_blocks(request))), kv)
    idle_tail = live_validation(one_level([request], scraped(on_demand_blocks(request), until=40.0)), kv)
    assert idle_tail["checks"][0]["status"] == "pass", idle_tail["checks"][0]["detail"]
    assert idle_tail["samples"] == 800 and idle_tail["busy_samples"] == short["busy_samples"] < 100
    held = sum(sample["vllm:kv_cache_usage_perc"] > 0 for sample in scraped(on_demand_blocks(request)))
    assert idle_tail["busy_samples"] > held  # waiting for its first token, it holds none yet, but is busy
    assert idle_tail["told_apart"] == short["told_apart"] > 0.3 * idle_tail["busy_samples"]
    leaked = scraped(lambda t: on_demand_blocks(request)(t) or (1 if t >= 29.99 else 0), until=40.0)
    leaking = live_validation(one_level([request], leaked), kv)["levels"][0]
    assert leaking["busy_samples"] == idle_tail["busy_samples"] + 200  # t = 30 .. 40 s
    assert leaking["outside"] == leaking["reservation"]["outside"] - idle_tail["told_apart"] == 200


def test_chunks_that_carry_several_tokens_widen_the_band_not_the_misses():
    """vLLM merges a request's outputs into one chunk when its API server falls behind: 40
    tokens in 20 chunks of two. The server's true usage still fits on demand; read as one token
    a chunk, the stream would put the request's end 20 tokens early and miss."""
    tokens = streamed(40, 40)
    merged = {**tokens, "itl": [0.2] * 19}  # the same 4 s of decoding, a chunk every 2 tokens
    truth = on_demand_blocks(tokens)
    result = live_validation(one_level([merged], scraped(truth)), {"block_size": 16, "num_blocks": 100})
    assert result["levels"][0]["outside_share"] <= MAX_OUTSIDE_SHARE, result["checks"][0]["detail"]
    _, band = request_band(merged, ON_DEMAND)
    # One chunk in: between 1 and 40 - 19 = 21 tokens had come, ceil(40 / 16) .. ceil(62 / 16) blocks.
    assert band(1.55)[:2] == (3, 4)


def test_preemption_excuses_only_the_levels_it_touched():
    request = streamed(40, 40)
    doubled = scraped(lambda t: 2 * on_demand_blocks(request)(t) + 4 * (1.6 < t < 5.0))
    good = scraped(on_demand_blocks(request))
    load = one_level([request], doubled, preemptions=3.0)
    load["levels"].append({**one_level([request], good)["levels"][0], "max_concurrency": 2})
    assert live_validation(load, {"block_size": 16, "num_blocks": 100})["checks"][0]["status"] == "warn"
    load["levels"][0]["preemptions"] = 0.0
    load["levels"][1]["preemptions"] = 3.0  # preempted where it fit; the failing level was not
    assert live_validation(load, {"block_size": 16, "num_blocks": 100})["checks"][0]["status"] == "fail"


def test_says_when_the_load_cannot_tell_them_apart():
    """Short requests in large blocks hold one block either way: not a pass, a warning that
    names the block size to use."""
    requests = [streamed(20, 8, sent=1.0 + i, id=f"r-{i}#{i}") for i in range(4)]

    def blocks(t):
        return sum(on_demand_blocks(request, 128)(t) for request in requests)

    result = live_validation(one_level(requests, scraped(blocks)), {"block_size": 128, "num_blocks": 100})
    assert (
        result["checks"][0]["status"] == "warn"
        and "cannot tell" in result["checks"][0]["detail"]
        and "block_size to 32" in result["checks"][0]["detail"]
    )
    assert result["reservation_outside_share"] <= MAX_OUTSIDE_SHARE


def test_shared_prefix_blocks_are_held_once():
    """Two requests with one 70-token prompt in flight together, prefix caching on: their four
    full prompt blocks are held once (vLLM's usage), which the check predicts from their
    prompts' blocks; summed per request, the same usage falls outside by four blocks."""
    tokens = list(range(70))
    assert len(prefix_blocks(tokens, 16)) == 4 and len(prefix_blocks(tokens[:65], 16)) == 4
    assert len(prefix_blocks(tokens[:64], 16)) == 3  # vLLM's hit stops one token short
    first, second = streamed(70, 30, sent=1.0, id="shared#0"), streamed(70, 30, sent=1.05, id="shared#1")

    def blocks(t):
        held = [on_demand_blocks(r)(t) for r in (first, second)]
        return sum(held) - 4 * (min(held) > 0)

    kv = {"block_size": 16, "num_blocks": 100, "prefix_caching": True}
    load = one_level([first, second], scraped(blocks))
    prefixes = {("completions", "shared"): prefix_blocks(tokens, 16)}
    shared = live_validation(load, kv, prefixes)
    assert shared["levels"][0]["outside_share"] <= MAX_OUTSIDE_SHARE, shared["checks"][0]["detail"]
    summed = live_validation(load, kv)
    assert summed["checks"][0]["status"] == "fail" and summed["levels"][0]["max_blocks_outside"] == 4
    # A chat level's requests are another prompt (the template around it): not shared with these.
    assert (
        live_validation(one_level([first, second], scraped(blocks), api="chat"), kv, prefixes)["checks"][0]["status"]
        == "fail"
    )


class WordTokenizer:
    """One token per word; the chat template puts two words around the turn."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [hash(word) % 1000 for word in (["<s>"] if add_special_tokens else []) + text.split()]}

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return "user: " + messages[-1]["content"] + " assistant:"


def test_request_prefixes_tokenize_as_the_server_did():
    workload = [
        {"id": "a", "prompt": " ".join(["w"] * 40), "api": "completions", "messages": [{"content": "x " * 40}]},
        {"id": "b", "prompt": "short prompt", "api": "completions", "messages": [{"content": "short"}]},
    ]
    record = {"request_id": "a#0", "prompt_tokens": 41}
    load = {
        "levels": [
            {"api": "completions", "repeats": [{"requests": [record, {"request_id": "b#1", "prompt_tokens": 9}]}]},
            {"api": "chat", "repeats": [{"requests": [{"request_id": "a#0", "prompt_tokens": 42}]}]},
        ]
    }
    prefixes, counts = request_prefixes(WordTokenizer(), workload, load, 16)
    # a: <s> + 40 words = 41 tokens (two full blocks before the last); b: 3 tokens, not the 9 recorded.
    assert counts == {"matched": 2, "unmatched": 1}
    assert len(prefixes[("completions", "a")]) == 2 and len(prefixes[("chat", "a")]) == 2
    assert prefixes[("completions", "a")] != prefixes[("chat", "a")]
    assert ("completions", "b") not in prefixes


def shifted_share(level: dict, kv: dict, shift: int) -> float:
    """Share of a level's samples outside the band when the prediction is `shift` blocks off."""
    outside = samples = 0
    for repeat in level["repeats"]:
        done = [r for r in repeat["requests"] if r["success"]]
        changes, band = predicted_band(done, allocation_models(kv["block_size"], False)["on_demand"])
        step_s = statistics.median(gap for r in done for gap in r["itl"])
        result = check_series(
            repeat["metrics_series"],
            changes,
            lambda t, band=band: tuple(blocks + shift for blocks in band(t)),
            kv["num_blocks"] - 1,
            step_s,
        )
        outside, samples = outside + result["outside"], samples + result["samples"]
    return outside / samples


def test_live_validation_against_the_server(tiny_run):
    """On vLLM, at blocks of 32 that the test workload's requests outgrow: the scraped usage lies
    in the on-demand band over the whole time series, the rival reservation fails it, and a
    prediction three blocks off fails, either way."""
    from infbench.core.artifacts import read_json, validate
    from infbench.kv.validation import request_levels

    live = read_json(tiny_run / "results/tiny/kv_validation.json")
    validate(live, "kv_validation")
    assert live["checks"][0]["status"] == "pass", live
    assert live["reservation_outside_share"] > MAX_OUTSIDE_SHARE and live["told_apart"] > 0
    load = read_json(tiny_run / "results/tiny/load.json")
    # Every level of workload requests, the users level and the session ramp left out (their
    # turns share blocks).
    assert len(live["levels"]) == len(request_levels(load)) == len(load["levels"]) - 2
    for level in live["levels"]:
        assert level["samples"] >= 10 and level["outside_share"] <= MAX_OUTSIDE_SHARE, level
    kv = read_json(tiny_run / "results/tiny/server.json")["kv"]
    assert kv["block_size"] == 32
    busy = [level for level in load["levels"] if level["mode"] == "concurrency" and level["max_concurrency"] == 4]
    for shift in (3, -3):
        assert shifted_share(busy[0], kv, shift) > MAX_OUTSIDE_SHARE


def test_shared_prefix_blocks_on_vllm(tiny_model, tmp_path):
    """vLLM with prefix caching on, at blocks of 32: 16 requests in fours behind one 100-token
    system prompt, each of 8 questions asked twice. Usage fits the band that counts every
    shared full block once (the prompts re-tokenized as the server tokenized them); summed per
    request, as if nothing were shared, the same scrapes fall outside."""
    import asyncio

    from conftest import tiny_config
    from transformers import AutoTokenizer

    from infbench.core.hardware import resolve_dtype
    from infbench.engines.server_metrics import server_kv_facts
    from infbench.engines.servers import ServerSpec, start_server
    from infbench.serving.client import LoadRequest, run_level
    from infbench.serving.sweep import request_records

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    system = " ".join(f"Rule {i}: answer briefly and cite the section you used." for i in range(9))
    workload = [
        {"id": f"q-{i}", "prompt": f"{system}\nQuestion {i}: what is block {i} for?", "api": "completions"}
        for i in range(8)
    ]
    for request in workload:
        request["prompt_tokens"] = len(tokenizer(request["prompt"])["input_ids"])
    assert min(r["prompt_tokens"] for r in workload) > 100
    requests = [LoadRequest(f"{r['id']}#{n}", r["prompt"], r["prompt_tokens"], 24) for n, r in enumerate(workload * 2)]
    config = tiny_config(tiny_model)
    dtype = resolve_dtype(config["hardware"]["dtype"], config["hardware"]["device"])
    spec = ServerSpec.from_config(config, tiny_model, "tiny", dtype)
    with start_server(spec.with_engine(block_size=32, enable_prefix_caching=True), tmp_path / "server.log") as server:
        kv = server_kv_facts(server.base_url)
        run = asyncio.run(
            run_level(
                server.base_url, "tiny", requests, concurrency=4, arrivals=None, seed=0, interval_s=0.02, timeout_s=60
            )
        )
    assert kv["prefix_caching"] and kv["block_size"] == 32
    level = {"mode": "concurrency", "max_concurrency": 4, "request_rate": "inf", "preemptions": 0.0}
    load = {
        "levels": [{**level, "repeats": [{"requests": request_records(run), "metrics_series": run.metrics.samples}]}]
    }
    prefixes, counts = request_prefixes(tokenizer, workload, load, 32)
    assert counts == {"matched": 16, "unmatched": 0}
    assert len({blocks[0] for blocks in prefixes.values()}) == 1  # one system prompt: its first block shared
    shared = live_validation(load, kv, prefixes)
    assert shared["levels"][0]["samples"] >= 10
    assert shared["levels"][0]["outside_share"] <= MAX_OUTSIDE_SHARE, shared["checks"][0]["detail"]
    summed = live_validation(load, kv)
    assert summed["levels"][0]["outside_share"] > MAX_OUTSIDE_SHARE, summed["checks"][0]["detail"]
