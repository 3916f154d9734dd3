"""The simulator's memory model checked live, over each load level's time series: the KV
blocks the requests in flight hold by the simulator's allocation rule (`simulator.held_blocks`,
by which its replay admits and grows sequences), against the blocks the server's
`vllm:kv_cache_usage_perc` reported at each scrape (usage x (num_blocks - 1): vLLM's gauge
leaves its null block out).

Two allocation models are held to the same samples: vLLM's, blocks on demand as a sequence
grows ("on_demand"), and its rival, the blocks of prompt + max_tokens reserved at admission
("reservation"). The check vouches for on-demand allocation only when on-demand passes and
more than MAX_OUTSIDE_SHARE of the busy samples (a request in flight, or blocks held) fit on
demand but not reserved: where every
request's reservation fits the blocks it fills anyway (short outputs in large blocks) the two
predict the same usage and the check says it cannot tell.

What the client saw of each request bounds what the server held at any instant:

    sent .. first token       0 .. held(prompt + 1)   (waiting, or prefilled)
    after k tokens arrived    held(prompt + k - 1) .. held(prompt + k + 1)
                              (the server may be a step ahead of the stream)
    from the last-but-one     0 .. the above (the engine frees a request in the step that
    token on                  produces its last token, before the client receives it)

With prefix caching on, a prompt's full blocks (all but the last token's: vLLM always
computes one) are hashed, and a block two requests in flight share is held once: the band
counts each distinct prefix block once among the requests that hold it, and each request's
other blocks apart.

A scrape answered at t read the gauge, which the engine updates once a step, somewhere in
[t - window, t], window = that scrape's round trip + the level's median inter-token latency
(one engine step). The sample is inside when its blocks lie within the band the requests
span over that window; the tolerance is that window and nothing else. A model fails a level
when more than MAX_OUTSIDE_SHARE of its samples fall outside: a simulator off by a few blocks
does, whatever the load.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable

from infbench.kv.simulator import Strategy, TraceRequest, held_blocks
from infbench.workload.requests import prompt_token_ids

MAX_OUTSIDE_SHARE = 0.1
USAGE = "vllm:kv_cache_usage_perc"
MODELS = ("on_demand", "reservation")

Band = Callable[[float], tuple[int, int]]  # time -> (fewest, most) blocks the requests hold
# time -> (fewest, most) private blocks, and whether the request surely / possibly holds its prefix
RequestBand = Callable[[float], tuple[int, int, bool, bool]]


def allocation_models(block_size: int, prefix_caching: bool) -> dict[str, Strategy]:
    """vLLM's paging, and the rival that reserves each request's whole length at admission."""
    return {
        "on_demand": Strategy(f"paged_{block_size}", "paged", block_size=block_size, share_prefix=prefix_caching),
        "reservation": Strategy(
            f"paged_{block_size}_reserved",
            "paged",
            reserve="max_tokens",
            block_size=block_size,
            share_prefix=prefix_caching,
        ),
    }


def prefix_blocks(token_ids: list[int], block_size: int) -> tuple[int, ...]:
    """The chained hashes of the prompt's blocks a later request can share: its full blocks
    before the last token (vLLM's cache hit stops one token short of the prompt)."""
    count = max(0, len(token_ids) - 1) // block_size
    return tuple(hash(tuple(token_ids[: (i + 1) * block_size])) for i in range(count))


def request_levels(load: dict) -> list[dict]:
    """The sweep's levels of workload requests: the turns of users levels and session ramps carry
    conversations that share their blocks, which this check's footprints do not model
    (docs/method.md#sessions)."""
    return [level for level in load["levels"] if level.get("mode") not in ("users", "session_ramp")]


def source_id(record: dict) -> str:
    """The workload request a load record ran ("synthetic-00003#5": pass position 5)."""
    return record["request_id"].split("#")[0]


def request_prefixes(tokenizer, workload: list[dict], load: dict, block_size: int) -> tuple[dict, dict]:
    """The prefix blocks of every request each API ran (`workload`: the workload's requests and
    the pool's, by id), from its prompt tokenized as
    the server tokenized it (completions: the workload's prompt; chat: its messages through the
    chat template). A prompt whose token count differs from the server's gets none, and each
    record of it is counted unmatched. Returns ((api, request id) -> prefix blocks, counts)."""
    by_id = {request["id"]: request for request in workload}
    prefixes, counts, seen = {}, {"matched": 0, "unmatched": 0}, {}
    for level in request_levels(load):
        api = level.get("api", "completions")
        for repeat in level["repeats"]:
            for record in repeat["requests"] + repeat.get("uncounted_requests", []):
                key = (api, source_id(record))
                if key not in seen:
                    source = by_id.get(key[1])
                    seen[key] = None if source is None else prompt_tokens_as_served(tokenizer, source, api)
                ids = seen[key]
                if ids is not None and len(ids) == record["prompt_tokens"]:
                    prefixes[key] = prefix_blocks(ids, block_size)
                    counts["matched"] += 1
                else:
                    counts["unmatched"] += 1
    return prefixes, counts


def prompt_tokens_as_served(tokenizer, request: dict, api: str) -> list[int]:
    if api == "chat":
        text = tokenizer.apply_chat_template(request["messages"], tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return prompt_token_ids(tokenizer, request)


def request_band(
    request: dict, strategy: Strategy, prefix: tuple[int, ...] = (), role_chunks: int = 0
) -> tuple[list[float], RequestBand]:
    """The times a request's band changes, and its band at any time (seconds from the level start).
    `role_chunks`: leading chunks that carry no token (the chat endpoint's role-only first one).

    A streamed chunk carries one token or more (vLLM merges outputs when the API server falls
    behind): after c of a request's C content chunks, between c and o - (C - c) of its o tokens
    had arrived, and the band spans both ends (with C = o, exactly c)."""
    prompt, output = request["prompt_tokens"], request["output_tokens"]
    # ignore_eos: every request ran to its max_tokens, so its output is its max_tokens.
    trace = TraceRequest(
        prompt, output, prefix_group=0 if prefix else None, prefix_len=len(prefix) * strategy.block_size
    )

    def held(stored: int) -> int:
        return held_blocks(strategy, trace, stored)

    sent = request["sent_s"]
    arrivals = [sent + request["ttft"]]
    for gap in request["itl"]:
        arrivals.append(arrivals[-1] + gap)
    skipped = min(role_chunks, len(arrivals) - 1)
    content = len(arrivals) - skipped  # C
    # More content chunks than tokens: the extra ones carry none (as a role-only chunk).
    skipped += max(0, content - output)
    content = min(content, output)
    final = held(prompt + max(output - 1, 0))

    def band(t: float) -> tuple[int, int, bool, bool]:
        if t < sent or t >= arrivals[-1]:
            return (0, 0, False, False)
        chunks = max(0, bisect.bisect_right(arrivals, t) - skipped)  # c
        most = output - (content - chunks)  # tokens by then, at most
        if chunks == 0:
            return (0, min(final, held(prompt + most + 1)), False, True)
        high = min(final, held(prompt + most + 1))
        surely = most < output - 1  # not yet at its last-but-one token, whatever the chunks held
        return (held(prompt + chunks - 1) if surely else 0, high, surely, True)

    return [sent, *arrivals], band


def predicted_band(
    requests: list[dict],
    strategy: Strategy,
    prefixes: dict[str, tuple[int, ...]] | None = None,
    role_chunks: int = 0,
) -> tuple[list[float], Band]:
    """The band of all successful requests together: their private blocks summed, and each
    distinct shared prefix block counted once among the requests that (surely, possibly) hold it.
    `prefixes`: workload request id -> its prompt's prefix blocks (used only where the strategy
    shares prefixes: prefix caching on)."""
    prefixes = prefixes if strategy.share_prefix else {}
    parts = [
        (
            prefixes.get(source_id(r), ()),
            *request_band(r, strategy, prefixes.get(source_id(r), ()), role_chunks),
        )
        for r in requests
        if r["success"]
    ]
    changes = sorted(t for _, times, _ in parts for t in times)

    def band(t: float) -> tuple[int, int]:
        low = high = 0
        surely_held: set[int] = set()
        possibly_held: set[int] = set()
        for prefix, _, part in parts:
            private_low, private_high, surely, possibly = part(t)
            low, high = low + private_low, high + private_high
            if surely:
                surely_held.update(prefix)
            if possibly:
                possibly_held.update(prefix)
        return (low + len(surely_held), high + len(possibly_held))

    return changes, band


def band_over(changes: list[float], band: Band, start: float, end: float) -> tuple[int, int]:
    """The fewest and most blocks the band allows anywhere in [start, end]."""
    inside = changes[bisect.bisect_right(changes, start) : bisect.bisect_left(changes, end)]
    values = [band(t) for t in (start, end, *inside)]
    return (min(v[0] for v in values), max(v[1] for v in values))


def sample_errors(samples: list[dict], changes: list[float], band: Band, usable_blocks: int, step_s: float) -> list:
    """Each scraped sample's blocks outside the band over its window (0: inside), its window, and
    whether it is busy: a request in flight over its window (the band allows blocks) or blocks
    read held. A sample of an empty server fits every allocation rule: it tells none apart."""
    errors = []
    for sample in samples:
        if USAGE not in sample:
            continue
        window = sample.get("scrape_s", 0.0) + step_s
        low, high = band_over(changes, band, sample["t"] - window, sample["t"])
        scraped = round(sample[USAGE] * usable_blocks)
        errors.append((max(low - scraped, scraped - high, 0), window, high > 0 or scraped > 0))
    return errors


def check_series(samples: list[dict], changes: list[float], band: Band, usable_blocks: int, step_s: float) -> dict:
    """Each scraped sample against the band over its window; what fell outside, and by how much."""
    errors = sample_errors(samples, changes, band, usable_blocks, step_s)
    outside = sum(error > 0 for error, *_ in errors)
    return {
        "samples": len(errors),
        "outside": outside,
        "outside_share": outside / len(errors) if errors else None,
        "max_blocks_outside": max((error for error, *_ in errors), default=0),
        "median_window_s": statistics.median(window for _, window, _ in errors) if errors else None,
    }


def level_check(level: dict, kv: dict, prefixes: dict[tuple[str, str], tuple[int, ...]] | None = None) -> dict:
    """Every repeat of a level checked against its own requests' band, under each allocation model.
    `prefixes`: (api, workload request id) -> prefix blocks (see request_prefixes)."""
    usable = kv["num_blocks"] - 1
    api = level.get("api", "completions")
    prefixes = {request: blocks for (of_api, request), blocks in (prefixes or {}).items() if of_api == api}
    models = allocation_models(kv["block_size"], bool(kv.get("prefix_caching")))
    totals = {name: {"samples": 0, "outside": 0, "max_blocks_outside": 0} for name in MODELS}
    told_apart = 0  # samples on-demand allocation explains and reservation does not
    busy = 0  # samples with a request in flight or blocks held: those that can tell the rules apart
    for repeat in level["repeats"]:
        # Every request the pass ran held blocks: a windowed pass's uncounted ones too.
        done = [r for r in repeat["requests"] + repeat.get("uncounted_requests", []) if r["success"]]
        gaps = [gap for r in done for gap in r["itl"]]
        step_s = statistics.median(gaps) if gaps else 0.0
        errors = {}
        for name in MODELS:
            changes, band = predicted_band(done, models[name], prefixes, role_chunks=1 if api == "chat" else 0)
            errors[name] = sample_errors(repeat["metrics_series"], changes, band, usable, step_s)
            totals[name]["samples"] += len(errors[name])
            totals[name]["outside"] += sum(error > 0 for error, *_ in errors[name])
            worst = max((error for error, *_ in errors[name]), default=0)
            totals[name]["max_blocks_outside"] = max(totals[name]["max_blocks_outside"], worst)
        pairs = list(zip(errors["on_demand"], errors["reservation"], strict=True))
        told_apart += sum(ours[0] == 0 and rival[0] > 0 for ours, rival in pairs)
        busy += sum(ours[2] or rival[2] for ours, rival in pairs)
    for result in totals.values():
        result["outside_share"] = result["outside"] / result["samples"] if result["samples"] else None
    return {
        "api": api,
        "mode": level["mode"],
        "max_concurrency": level["max_concurrency"],
        "request_rate": level["request_rate"],
        **totals["on_demand"],
        "reservation": totals["reservation"],
        "told_apart": told_apart,
        "busy_samples": busy,
        "preemptions": level.get("preemptions"),
    }


def on_demand_check(status: str, worst_share: float | None, detail: str) -> dict:
    """The stage's one check, in the shape every artifact's `checks` take (core/checks.py: not
    imported, so that this stage's code inputs stay the simulator's and the workload's)."""
    return {
        "name": "scraped KV blocks on demand, not reserved",
        "status": status,
        "value": worst_share,
        "detail": detail,
    }


def live_validation(
    load: dict, kv: dict, prefixes: dict[tuple[str, str], tuple[int, ...]] | None = None, unmatched: int = 0
) -> dict:
    """The check over every load level of the sweep (of this pipeline's server: an external
    endpoint's pool is not this config's, and the rule does not run for one). `prefixes`:
    (api, workload request id) -> its prompt's shareable blocks (`request_prefixes`), given
    when prefix caching is on."""
    levels = [level_check(level, kv, prefixes) for level in request_levels(load)]
    checked = [level for level in levels if level["samples"]]
    if not checked:
        return {
            "checks": [on_demand_check("warn", None, "no level was scraped: lower load.metrics_interval_s")],
            "max_outside_allowed": MAX_OUTSIDE_SHARE,
            "levels": levels,
        }
    samples = sum(level["samples"] for level in checked)
    worst = max(level["outside_share"] for level in checked)
    busy = sum(level["busy_samples"] for level in checked)
    rival_outside = sum(level["reservation"]["outside"] for level in checked)
    rival_share = rival_outside / busy if busy else 0.0
    told_apart = sum(level["told_apart"] for level in checked)
    failing = [level for level in checked if level["outside_share"] > MAX_OUTSIDE_SHARE]
    detail = (
        f"on demand (vLLM): {sum(level['outside'] for level in checked)} of {samples} scraped samples outside "
        f"the blocks the requests in flight held (worst level {worst * 100:.1f} %, fail above "
        f"{MAX_OUTSIDE_SHARE * 100:.0f} %); of the {busy} busy samples (a request in flight or blocks held), "
        f"{rival_outside} ({rival_share * 100:.1f} %) outside reservation of prompt + max_tokens at admission and "
        f"{told_apart} ({told_apart / busy * 100 if busy else 0:.1f} %) fit on demand and not reserved (pass above "
        f"{MAX_OUTSIDE_SHARE * 100:.0f} %)"
    )
    if kv.get("prefix_caching") and unmatched:
        detail += f"; {unmatched} requests' prompts did not re-tokenize to the server's count (sharing unmodelled)"
    if failing:
        status = "fail"
        if all(level["preemptions"] for level in failing):
            status = "warn"
            detail += "; requests were preempted, which the client cannot see, so the miss may be theirs"
    elif told_apart <= MAX_OUTSIDE_SHARE * busy:
        status = "warn"
        detail += (
            f"; this load cannot tell on-demand allocation from reservation (requests' whole lengths fit the "
            f"{kv['block_size']}-token blocks they fill anyway): set engine.block_size to 32 (16 on a GPU) or "
            "give requests longer outputs"
        )
    else:
        status = "pass"
    return {
        "checks": [on_demand_check(status, worst, detail)],
        "max_outside_share": worst,
        "max_outside_allowed": MAX_OUTSIDE_SHARE,
        "reservation_outside_share": rival_share,
        "told_apart": told_apart,
        "samples": samples,
        "busy_samples": busy,
        "prefix_caching": bool(kv.get("prefix_caching")),
        "levels": levels,
    }
