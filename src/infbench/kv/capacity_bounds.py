"""What a server's KV pool (`num_blocks`, `block_size`, `prefix_caching` as it reported them)
says of the capacity search's requests (objects with `prompt_tokens` and `max_tokens`): the
concurrency the simulator predicts, when the cache has no room for the largest request, and
the bounds the measured KV-limited concurrency must lie within. See docs/method.md#capacity-search
and #binding-limit.
"""

from __future__ import annotations

from infbench.kv.simulator import Strategy, TraceRequest, blocks_for, static_capacity


def predicted_kv_concurrency(requests: list, kv: dict, max_model_len: int) -> dict:
    """Requests (in the probe's order) that fit the pool at once at their peak footprint,
    prompt + max_tokens in whole blocks, of num_blocks - 1 blocks (vLLM's null block is lent to none)."""
    block = kv["block_size"]
    usable = kv["num_blocks"] - 1
    trace = [TraceRequest(r.prompt_tokens, r.max_tokens) for r in requests]
    strategy = Strategy(f"paged_{block}", "paged", block_size=block)
    value = static_capacity(trace, strategy, usable * block, max_model_len)
    return {
        "value": value,
        "usable_blocks": usable,
        "block_size": block,
        "mean_blocks_per_request": sum(blocks_for(t.final, block) for t in trace) / len(trace),
        "formula": "requests admitted in order until the next one's ceil((prompt + max_tokens) / block_size) "
        "blocks no longer fit num_blocks - 1",
    }


def kv_full_usage(requests: list, kv: dict | None) -> float:
    """The KV usage at which the cache has no room for the largest request (1.0 without a pool)."""
    if not kv:
        return 1.0
    largest = max(blocks_for(r.prompt_tokens + r.max_tokens, kv["block_size"]) for r in requests)
    return 1 - largest / (kv["num_blocks"] - 1)


def kv_limit_agreement(measured: float, requests: list, kv: dict, predicted: int) -> dict:
    """The most requests run at once where KV memory bound (`measured`) against any server's
    bounds over U = num_blocks - 1 blocks of B tokens: at least floor((U - L) / L), L the largest
    request's ceil((prompt + max_tokens) / B); at most floor(U / S), S the smallest prompt's
    ceil(prompt / B), none with prefix caching; `predicted` (the simulator's) beside them."""
    block, usable = kv["block_size"], kv["num_blocks"] - 1
    largest = max(blocks_for(r.prompt_tokens + r.max_tokens, block) for r in requests)
    smallest = max(1, min(blocks_for(r.prompt_tokens, block) for r in requests))
    low = max(0, (usable - largest) // largest)
    high = None if kv.get("prefix_caching") else usable // smallest
    inside = low <= measured and (high is None or measured <= high)
    shown_high = f"{high}" if high is not None else "no bound (prefix caching shares blocks)"
    return {
        "measured": measured,
        "predicted": predicted,
        "at_least": low,
        "at_most": high,
        "status": "pass" if inside else "fail",
        "detail": f"at most {measured:.0f} requests ran at once where KV memory bound (the simulator predicted "
        f"{predicted}); with {usable} blocks of {block} tokens, the largest request {largest} blocks at its peak and "
        f"the smallest prompt {smallest}, any server holds between {low} and {shown_high}"
        + ("" if inside else ": outside, the pool the server ran is not the one it reported"),
    }
