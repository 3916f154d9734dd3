"""How late this machine wakes a sleeping process while a test runs: the allowance a timing
check makes for a slow or busy machine, measured alongside the check rather than guessed.

A probe process of its own sleeps `period_s` over and over for as long as the test runs and
records by how much each sleep overran; every tenth wake it also times a fixed piece of Python
work, whose fastest run says how much slower than the machine the fixed costs were measured
on this one is. The server and the client under test wait the same way (a timer, then the
scheduler's turn for a CPU), so on a machine busy with other work their waits overrun by
about as much; a fault in the code under test (a blocking call, a per-chunk cost, a wrong
schedule) delays that code, and the probe only as far as the fault takes a CPU the probe
needs, so a bound of "the schedule, plus the code's own cost measured on an idle machine and
scaled by `slowness`, plus what the probe saw" still fails on it where the machine has a CPU
to spare (each planted fault was seen failing on 2 cores; on one core a CPU-bound fault also
delays the probe and loosens the bound).

    with SchedulingJitter() as jitter:
        ...  # the level under test
    assert lateness < jitter.allowance(SEND_COST_S, wakes=2), jitter
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

PROBE = r"""
import json, sys, threading, time
period = float(sys.argv[1])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
late, job = [], []
def work():
    started, total = time.perf_counter(), 0
    for i in range(5000):
        total += i * i
    job.append(time.perf_counter() - started)
work()
print("ready", flush=True)
while not stop.is_set():
    before = time.perf_counter()
    time.sleep(period)
    late.append(time.perf_counter() - before - period)
    if len(late) % 10 == 0:
        work()
print(json.dumps({"late": late, "job": job}), flush=True)
"""
# The probe's piece of work took this long at its fastest on the machine (idle) where the
# fixed costs the tests allow for were measured.
REFERENCE_JOB_S = 0.0002


class SchedulingJitter:
    """A probe process's sleeps' overruns (`late_s`, seconds) while the `with` block ran."""

    def __init__(self, period_s: float = 0.002):
        self.period_s = period_s
        self.late_s: list[float] = []
        self.job_s: list[float] = []

    def __enter__(self) -> SchedulingJitter:
        self.process = subprocess.Popen(
            [sys.executable, "-c", PROBE, str(self.period_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *exc) -> None:
        out, _ = self.process.communicate(input="", timeout=30)  # closing its stdin stops it
        measured = json.loads(out.splitlines()[-1])
        self.late_s, self.job_s = measured["late"] or [0.0], measured["job"]

    def quantile(self, q: float) -> float:
        ordered = sorted(self.late_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def max_s(self) -> float:
        """The longest a wake waited."""
        return max(self.late_s)

    def worst_run_s(self, wakes: int) -> float:
        """The most that `wakes` wakes in a row overran by, together: what a path waiting on
        that many timers (or that many turns for a CPU) one after another could lose."""
        n = max(1, min(wakes, len(self.late_s)))
        total = best = sum(self.late_s[:n])
        for index in range(n, len(self.late_s)):
            total += self.late_s[index] - self.late_s[index - n]
            best = max(best, total)
        return best

    @property
    def slowness(self) -> float:
        """How many times slower than the reference machine this one ran the probe's work at
        its fastest (at least 1)."""
        return max(1.0, min(self.job_s) / REFERENCE_JOB_S)

    def allowance(self, cost_s: float, wakes: int = 1) -> float:
        """What a path may run late by here: its own `cost_s` (measured idle on the reference
        machine) scaled by `slowness`, and the worst `wakes` waits in a row the probe saw."""
        return cost_s * self.slowness + self.worst_run_s(wakes)

    @property
    def median_s(self) -> float:
        return statistics.median(self.late_s)

    def __repr__(self) -> str:
        return (
            f"SchedulingJitter({len(self.late_s)} sleeps of {self.period_s * 1000:g} ms overran by: median "
            f"{self.median_s * 1000:.2f} ms, p99 {self.quantile(0.99) * 1000:.2f} ms, max {self.max_s * 1000:.2f} ms; "
            f"slowness {self.slowness:.2f})"
        )


def waited_from(due_s: float, sent_s: float, sends_s: list[float]) -> float:
    """When a request due at `due_s` and sent at `sent_s` last had the client's one event loop
    to itself to wait for: its time, or the last other send the client began while it waited
    (each such send's cost came first). Its send should follow within one send's cost."""
    return max([due_s] + [other for other in sends_s if due_s <= other < sent_s])
