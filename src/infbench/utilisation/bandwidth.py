"""This machine's memory bandwidth on the engine's cores and thread count (or on the GPU), over
arrays far larger than any cache, two ways:

    read    s = sum(b)          bytes per pass = array bytes (one array read)
    triad   a = b + 3 c         bytes per pass = 3 x array bytes (STREAM's count: two read, one
                                written; on CPUs the written line is also read first, which
                                STREAM does not count, so the triad reads low by up to a quarter)

A decode step reads weights and KV cache and writes little, which the read measures; a reduction
can also be bound by the cores rather than the memory, so MBU is computed against the higher of
the two (mbu.reference_bandwidth, the kernel used stated). Each is the best pass (the
hardware's reach), with the median kept to show the spread.
"""

from __future__ import annotations

import statistics
import time

ARRAY_MIB = 256  # each array: 768 MiB for the triad's three, beyond any cache
PASSES = 10


def _timed(kernel, passes: int, sync) -> list[float]:
    """Seconds of each pass after one untimed pass (it touches the pages and warms the pool)."""
    seconds = []
    for index in range(passes + 1):
        sync()
        started = time.perf_counter()
        kernel()
        sync()
        if index:
            seconds.append(time.perf_counter() - started)
    return seconds


def memory_bandwidth(device: str, array_mib: int = ARRAY_MIB, passes: int = PASSES) -> dict:
    """The read bandwidth with the triad's beside it (MBU uses the higher), with torch (float32);
    the caller has pinned the process and set torch's threads."""
    import torch

    count = array_mib * (1 << 20) // 4
    target = "cuda" if device == "cuda" else "cpu"
    b = torch.rand(count, device=target)
    c = torch.rand(count, device=target)
    a = torch.empty(count, device=target)

    def sync():
        if target == "cuda":
            torch.cuda.synchronize()

    def record(method: str, moved: int, seconds: list[float]) -> dict:
        return {
            "method": method,
            "device": target,
            "threads": torch.get_num_threads(),
            "array_bytes": count * 4,
            "bytes_per_pass": moved,
            "passes": passes,
            "best_bytes_per_s": moved / min(seconds),
            "median_bytes_per_s": moved / statistics.median(seconds),
            "pass_seconds": seconds,
        }

    read = record("read: sum of a float32 array, torch", count * 4, _timed(lambda: torch.sum(b), passes, sync))
    triad = record(
        "STREAM triad a = b + 3 c, float32, torch",
        3 * count * 4,
        _timed(lambda: torch.add(b, c, alpha=3.0, out=a), passes, sync),
    )
    return {**read, "triad": triad}
