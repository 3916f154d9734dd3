"""Prefix caching off and on, side by side: two servers with the same engine settings but
`enable_prefix_caching`, alive together and taking turns on the same request sets (who goes
first alternating by round), so drift of the machine falls on both. Before every measured
pass the server's prefix cache is emptied (vLLM's /reset_prefix_cache, a dev-mode endpoint),
so each pass starts cold and its hits can be predicted block by block (serving.prefix_sets)."""

from __future__ import annotations

import asyncio

from infbench.core.checks import check
from infbench.core.metrics import aggregate
from infbench.core.stats import paired_ratio
from infbench.engines.vllm_server import reset_prefix_cache
from infbench.serving.client import LoadRequest, cycle_requests, run_level
from infbench.serving.prefix_sets import PrefixSet, predicted_hits
from infbench.serving.sweep import Level, warmup_requests
from infbench.workload.requests import prompt_token_ids

ARMS = ("off", "on")
# Figures compared on / off, per set: the gain prefix caching brings.
GAINS = {"median_ttft_ms": "lower", "mean_ttft_ms": "lower", "output_throughput": "higher"}
# On: a pass whose hits fall below this share of the prediction is flagged (requests admitted in
# one step miss each other's blocks, so some shortfall is expected at concurrency > 1).
HIT_SHORTFALL_WARN = 0.5


def measured_pass(
    server, requests: list[LoadRequest], *, api: str, concurrency: int, interval_s: float, timeout_s: float
) -> dict:
    """An untimed warm-up (the first requests, short), the cache emptied, then one timed pass;
    the pass's prefix-cache hits and queries in tokens, from /metrics counters around it."""

    def level(batch, in_flight):
        return asyncio.run(
            run_level(
                server.base_url, server.served_name, batch, concurrency=in_flight, arrivals=None, seed=0,
                interval_s=interval_s, timeout_s=timeout_s, api=api,
            )
        )  # fmt: skip

    warm = warmup_requests(requests, Level(concurrency))
    level(warm, len(warm))
    reset_prefix_cache(server.base_url)
    run = level(requests, concurrency)
    summary = aggregate([s.result for s in run.results], run.duration_s)
    queries = run.metrics.first_last("vllm:prefix_cache_queries_total")
    hits = run.metrics.first_last("vllm:prefix_cache_hits_total")
    query_tokens, hit_tokens = queries[1] - queries[0], hits[1] - hits[0]
    return {
        **{key: summary[key] for key in ("completed", "failed", "output_throughput", "request_throughput")},
        "median_ttft_ms": summary["median_ttft_ms"],
        "mean_ttft_ms": summary["mean_ttft_ms"],
        "median_tpot_ms": summary["median_tpot_ms"],
        "query_tokens": query_tokens,
        "hit_tokens": hit_tokens,
        "hit_rate": hit_tokens / query_tokens if query_tokens else 0.0,
    }


def run_rounds(servers: dict, sets: list[PrefixSet], *, rounds: int, concurrency: int, interval_s: float,
               timeout_s: float, progress=print) -> list[dict]:  # fmt: skip
    """`rounds` rounds; in each, every set runs once on each server, who goes first alternating."""
    requests = {s.name: cycle_requests(s.requests, len(s.requests)) for s in sets}
    records = []
    for index in range(rounds):
        order = list(ARMS) if index % 2 == 0 else list(reversed(ARMS))
        record = {"round": index + 1, "order": order}
        for prefix_set in sets:
            record[prefix_set.name] = {}
            for arm in order:
                result = measured_pass(
                    servers[arm], requests[prefix_set.name], api=prefix_set.requests[0]["api"],
                    concurrency=concurrency, interval_s=interval_s, timeout_s=timeout_s,
                )  # fmt: skip
                record[prefix_set.name][arm] = result
                progress(
                    f"round {index + 1}/{rounds}, {prefix_set.name}, prefix caching {arm}: median TTFT "
                    f"{result['median_ttft_ms']:.0f} ms, {result['output_throughput']:.1f} output tok/s, "
                    f"prefix-cache hits {result['hit_rate']:.0%} of prompt tokens"
                )
        records.append(record)
    return records


def gains(rounds: list[dict], name: str) -> dict:
    """Per figure, on / off: the geometric mean of the rounds' ratios with a paired 95 % interval."""
    return {
        key: paired_ratio([r[name]["on"][key] for r in rounds], [r[name]["off"][key] for r in rounds]) for key in GAINS
    }


def hit_checks(rounds: list[dict], name: str, predicted: dict) -> list[dict]:
    """Off, no pass may hit the cache. On, no pass may hit more than the prediction (that would
    be blocks the set cannot share: a cache not emptied, or a wrong prediction), and one that
    hits less than HIT_SHORTFALL_WARN of it is flagged."""
    off = [r[name]["off"]["hit_tokens"] for r in rounds]
    on = [r[name]["on"]["hit_tokens"] for r in rounds]
    expected = predicted["hit_tokens"]
    over = [hits for hits in on if hits > expected]
    short = [hits for hits in on if hits < HIT_SHORTFALL_WARN * expected]
    return [
        check(
            f"{name}_no_hits_with_caching_off",
            "fail" if any(off) else "pass",
            max(off),
            f"prefix-cache hits with prefix caching off, per round: {off} tokens (must be 0)",
        ),
        check(
            f"{name}_hits_as_predicted",
            "fail" if over else "warn" if short else "pass",
            sum(on) / len(on) / expected if expected else None,
            f"hits with prefix caching on, per round: {on} tokens; predicted at most {expected} "
            f"({predicted['shared_blocks']} blocks of {predicted['block_size']}); more fails, under "
            f"{HIT_SHORTFALL_WARN:.0%} of it warns (requests admitted in one step miss each other's blocks)",
        ),
    ]


def summarize_sets(sets: list[PrefixSet], rounds: list[dict], tokenizer, block_size: int) -> tuple[list, list]:
    """Per set its requests, predicted hits and gains; and every set's hit checks."""
    results, checks = [], []
    for prefix_set in sets:
        predicted = predicted_hits([prompt_token_ids(tokenizer, r) for r in prefix_set.requests], block_size)
        checks += hit_checks(rounds, prefix_set.name, predicted)
        results.append(
            {
                "name": prefix_set.name,
                "description": prefix_set.description,
                "requests": prefix_set.requests,
                "predicted": predicted,
                "gains": gains(rounds, prefix_set.name),
            }
        )
    return results, checks
