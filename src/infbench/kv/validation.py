"""The simulator's memory model checked live, over each load level's time series: the KV
blocks the requests in flight hold by the simulator's arithmetic (whole blocks of the tokens
each has stored), against the blocks the server's `vllm:kv_cache_usage_perc` reported at each
scrape (usage x (num_blocks - 1): vLLM's gauge leaves its null block out).

What the client saw of each request bounds what the server held at any instant:

    sent .. first token       0 .. ceil((prompt + 1) / B)   (waiting, or prefilled)
    after k tokens arrived    ceil((prompt + k - 1) / B) .. ceil((prompt + k + 1) / B)
                              (the server may be a step ahead of the stream)
    from the last-but-one     0 .. the above (the engine frees a request in the step that
    token on                  produces its last token, before the client receives it)

A scrape answered at t read the gauge, which the engine updates once a step, somewhere in
[t - window, t], window = that scrape's round trip + the level's median inter-token latency
(one engine step). The sample is inside when its blocks lie within the band the requests
span over that window; the tolerance is that window and nothing else. A level fails when
more than MAX_OUTSIDE_SHARE of its samples fall outside: a simulator off by a few blocks
does, whatever the load.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from infbench.kv.simulator import blocks_for

MAX_OUTSIDE_SHARE = 0.1
USAGE = "vllm:kv_cache_usage_perc"

Band = Callable[[float], tuple[int, int]]  # time -> (fewest, most) blocks the requests hold


def request_band(request: dict, block_size: int) -> tuple[list[float], Callable[[float], tuple[int, int]]]:
    """The times a request's band changes, and its band at any time (seconds from the level start)."""
    prompt, output = request["prompt_tokens"], request["output_tokens"]
    sent = request["sent_s"]
    arrivals = [sent + request["ttft"]]
    for gap in request["itl"]:
        arrivals.append(arrivals[-1] + gap)
    # Chunks beyond the output tokens (the chat endpoint's first, role-only chunk) carry none.
    extra = max(0, len(arrivals) - output)
    final = blocks_for(prompt + max(output - 1, 0), block_size)

    def band(t: float) -> tuple[int, int]:
        if t < sent or t >= arrivals[-1]:
            return (0, 0)
        chunks = sum(1 for a in arrivals if a <= t)
        tokens = max(0, chunks - extra)
        if tokens == 0:
            return (0, blocks_for(prompt + 1, block_size))
        high = min(final, blocks_for(prompt + tokens + 1, block_size))
        low = 0 if tokens >= output - 1 else blocks_for(prompt + tokens - 1, block_size)
        return (low, high)

    return [sent, *arrivals], band


def predicted_band(requests: list[dict], block_size: int) -> tuple[list[float], Band]:
    """The band of all successful requests together: sums of their bands."""
    parts = [request_band(r, block_size) for r in requests if r["success"]]
    changes = sorted(t for times, _ in parts for t in times)

    def band(t: float) -> tuple[int, int]:
        lows, highs = zip(*(part(t) for _, part in parts)) if parts else ((0,), (0,))
        return (sum(lows), sum(highs))

    return changes, band


def band_over(changes: list[float], band: Band, start: float, end: float) -> tuple[int, int]:
    """The fewest and most blocks the band allows anywhere in [start, end]."""
    points = [start, end, *(t for t in changes if start < t < end)]
    values = [band(t) for t in points]
    return (min(v[0] for v in values), max(v[1] for v in values))


def check_series(samples: list[dict], changes: list[float], band: Band, usable_blocks: int, step_s: float) -> dict:
    """Each scraped sample against the band over its window; what fell outside, and by how much."""
    outside, worst, windows, checked = 0, 0, [], 0
    for sample in samples:
        if USAGE not in sample:
            continue
        window = sample.get("scrape_s", 0.0) + step_s
        low, high = band_over(changes, band, sample["t"] - window, sample["t"])
        scraped = round(sample[USAGE] * usable_blocks)
        error = max(low - scraped, scraped - high, 0)
        outside += error > 0
        worst = max(worst, error)
        windows.append(window)
        checked += 1
    return {
        "samples": checked,
        "outside": outside,
        "outside_share": outside / checked if checked else None,
        "max_blocks_outside": worst,
        "median_window_s": statistics.median(windows) if windows else None,
    }


def level_check(level: dict, kv: dict) -> dict:
    """Every repeat of a level checked against its own requests' band."""
    usable = kv["num_blocks"] - 1
    totals = {"samples": 0, "outside": 0, "max_blocks_outside": 0}
    for repeat in level["repeats"]:
        done = [r for r in repeat["requests"] if r["success"]]
        gaps = [gap for r in done for gap in r["itl"]]
        step_s = statistics.median(gaps) if gaps else 0.0
        changes, band = predicted_band(done, kv["block_size"])
        result = check_series(repeat["metrics_series"], changes, band, usable, step_s)
        totals["samples"] += result["samples"]
        totals["outside"] += result["outside"]
        totals["max_blocks_outside"] = max(totals["max_blocks_outside"], result["max_blocks_outside"])
    share = totals["outside"] / totals["samples"] if totals["samples"] else None
    return {
        "api": level.get("api", "completions"),
        "mode": level["mode"],
        "max_concurrency": level["max_concurrency"],
        "request_rate": level["request_rate"],
        **totals,
        "outside_share": share,
        "preemptions": level.get("preemptions"),
    }


def live_validation(load: dict, kv: dict) -> dict:
    """The check over every load level of the sweep (of this pipeline's server: an external
    endpoint's pool is not this config's, and the rule does not run for one)."""
    levels = [level_check(level, kv) for level in load["levels"]]
    checked = [level for level in levels if level["samples"]]
    if not checked:
        return {"status": "warn", "detail": "no level was scraped: lower load.metrics_interval_s", "levels": levels}
    worst = max(level["outside_share"] for level in checked)
    preempted = [level for level in checked if level["preemptions"]]
    status = "fail" if worst > MAX_OUTSIDE_SHARE else "pass"
    detail = (
        f"{sum(level['outside'] for level in checked)} of {sum(level['samples'] for level in checked)} scraped "
        f"samples outside the blocks the requests in flight held (worst level {worst * 100:.1f} %, "
        f"fail above {MAX_OUTSIDE_SHARE * 100:.0f} %)"
    )
    if preempted and status == "fail":
        status = "warn"
        detail += "; requests were preempted, which the client cannot see, so the miss may be theirs"
    return {
        "status": status,
        "detail": detail,
        "max_outside_share": worst,
        "max_outside_allowed": MAX_OUTSIDE_SHARE,
        "levels": levels,
    }
