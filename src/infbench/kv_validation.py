"""The simulator checked live: the KV-cache usage it predicts for each closed-loop load level
against the usage the server's `/metrics` reported while that level ran."""

from __future__ import annotations

from infbench.kv_simulator import Strategy, TraceRequest, replay

# The scrape samples the gauge every metrics_interval_s, so it can miss the true peak by the
# usage of the blocks allocated in between; beyond this absolute error the check warns.
LIVE_TOLERANCE = 0.02


def live_validation(load: dict, kv: dict, max_model_len: int) -> dict:
    """Predicted vs scraped peak `vllm:kv_cache_usage_perc` for each closed-loop load level:
    the level's own requests replayed with the client's concurrency as the running cap."""
    strategy = Strategy(f"paged_{kv['block_size']}", "paged", block_size=kv["block_size"])
    slots = (kv["num_blocks"] - 1) * kv["block_size"]
    levels = []
    for level in load["levels"]:
        if level["mode"] != "concurrency":
            continue  # open-loop arrivals are wall-clock times the step model does not map
        # Every repeat sends the same requests; the scraped peak is the highest over the repeats.
        first = level["repeats"][0]["requests"]
        trace = [TraceRequest(r["prompt_tokens"], r["output_tokens"]) for r in first if r["success"]]
        predicted = replay(trace, strategy, slots, max_model_len, max_running=level["max_concurrency"])
        # vLLM keeps one null block out of use: its gauge divides by num_blocks - 1.
        predicted_peak = predicted.peak_allocated / kv["block_size"] / (kv["num_blocks"] - 1)
        error = level["peak_kv_cache_usage_perc"] - predicted_peak
        levels.append(
            {
                "api": level.get("api", "completions"),
                "max_concurrency": level["max_concurrency"],
                "predicted_peak": predicted_peak,
                "scraped_peak": level["peak_kv_cache_usage_perc"],
                "error": error,
                "samples": sum(len(repeat["metrics_series"]) for repeat in level["repeats"]),
            }
        )
    if not levels:
        return {"status": "pending", "note": "no closed-loop load level was run", "levels": []}
    observed = [level for level in levels if level["scraped_peak"] > 0]
    unobserved = len(levels) - len(observed)
    worst = max((abs(level["error"]) for level in observed), default=None)
    status = "warn" if unobserved or worst > LIVE_TOLERANCE else "pass"
    note = "scraped peaks can fall below the prediction when the scrape misses the peak instant"
    if unobserved:
        note = (
            f"the scrape saw no KV usage in {unobserved} of {len(levels)} levels (levels shorter than "
            "load.metrics_interval_s): lower the interval or raise load.requests_per_level"
        )
    return {"status": status, "tolerance": LIVE_TOLERANCE, "max_abs_error": worst, "levels": levels, "note": note}
