"""When each request of an open-loop level leaves the client, scheduled as vLLM's benchmark
schedules them (vllm/benchmarks/serve.py, get_request):

    gap_i  ~ Gamma(shape = burstiness, scale = 1 / (rate_i * burstiness))   mean 1 / rate_i
             (burstiness 1 is a Poisson process; below 1 burstier, above 1 more even)
    send_i = gap_1 + ... + gap_i
    fixed rate:  send_i *= (N / rate) / send_N, so the last request leaves at exactly N / rate
                 and the offered rate is the configured one whatever the seed
    linear ramp: rate_i = start + (end - start) * i / (N - 1), not rescaled

or as a trace's requests arrived (TraceArrivals): send_i = arrival_i / scale.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Arrivals:
    rate: float  # requests per second; with a ramp, the rate of the first request
    burstiness: float = 1.0
    ramp_to: float | None = None  # linear ramp from `rate` to this rate over the level

    def rate_of(self, index: int, count: int) -> float:
        if self.ramp_to is None:
            return self.rate
        return self.rate + (self.ramp_to - self.rate) * index / max(count - 1, 1)

    def offsets(self, count: int, seed: int) -> list[float]:
        return send_offsets(count, self, seed)


def workload_trace(workload: list[dict]) -> tuple[float, ...]:
    """The arrival times of a workload's trace requests, in the trace's order (empty: none)."""
    return tuple(r["arrival_s"] for r in workload if r.get("kind") == "trace")


def replayable(arrival_s: tuple[float, ...]) -> bool:
    """Has a trace timing to replay: two arrivals or more, not all at one instant."""
    return len(arrival_s) >= 2 and arrival_s[-1] > arrival_s[0]


@dataclass(frozen=True)
class TraceArrivals:
    """A trace's requests sent when they arrived in the trace (seconds from its first), the
    clock sped up by `scale`; `rate` is the trace's own rate, (n - 1) / span, times the scale.
    Only for a replayable trace."""

    arrival_s: tuple[float, ...]
    scale: float = 1.0
    burstiness = None
    ramp_to = None

    @property
    def rate(self) -> float:
        return (len(self.arrival_s) - 1) / (self.arrival_s[-1] - self.arrival_s[0]) * self.scale

    def offsets(self, count: int, seed: int) -> list[float]:
        if count != len(self.arrival_s):
            raise ValueError(f"a trace of {len(self.arrival_s)} arrivals replays as many requests, not {count}")
        return [arrival / self.scale for arrival in self.arrival_s]


def send_offsets(count: int, arrivals: Arrivals, seed: int) -> list[float]:
    """Seconds after the level's start at which each of `count` requests is sent."""
    if count < 1:
        return []
    rng = random.Random(seed)
    shape = arrivals.burstiness
    gaps = [rng.gammavariate(shape, 1.0 / (arrivals.rate_of(i, count) * shape)) for i in range(count)]
    offsets = list(itertools.accumulate(gaps))
    if arrivals.ramp_to is None:
        scale = (count / arrivals.rate) / offsets[-1]
        offsets = [offset * scale for offset in offsets]
    return offsets
