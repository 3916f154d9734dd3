"""This machine's memory bandwidth, measured as STREAM's triad measures it: a = b + s * c over
arrays far larger than any cache, on the engine's cores and thread count (or on the GPU).

    bytes per pass = 3 x array bytes (two arrays read, one written; no write-allocate counted)
    bandwidth      = bytes per pass / seconds per pass; STREAM reports the best pass

The best pass is the hardware's reach; the median is kept beside it to show the spread.
"""

from __future__ import annotations

import statistics
import time

ARRAY_MIB = 256  # each of the three arrays: 768 MiB in all, beyond any cache
PASSES = 10


def triad_bandwidth(device: str, array_mib: int = ARRAY_MIB, passes: int = PASSES) -> dict:
    """Triad passes with torch (float32), after one untimed pass; the caller has pinned the
    process and set torch's threads."""
    import torch

    count = array_mib * (1 << 20) // 4
    target = "cuda" if device == "cuda" else "cpu"
    b = torch.rand(count, device=target)
    c = torch.rand(count, device=target)
    a = torch.empty(count, device=target)

    def sync():
        if target == "cuda":
            torch.cuda.synchronize()

    seconds = []
    for index in range(passes + 1):
        sync()
        started = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        sync()
        if index:  # the first pass touches the pages and warms up the thread pool
            seconds.append(time.perf_counter() - started)
    moved = 3 * count * 4
    return {
        "method": "STREAM triad a = b + 3 c, float32, torch",
        "device": target,
        "threads": torch.get_num_threads(),
        "array_bytes": count * 4,
        "bytes_per_pass": moved,
        "passes": passes,
        "best_bytes_per_s": moved / min(seconds),
        "median_bytes_per_s": moved / statistics.median(seconds),
        "pass_seconds": seconds,
    }
