"""What an engine run records about itself, read from the running engine rather than the
config: the clock its times are on, and the CPUs its threads may run on."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

# Both offline engines are timed on this clock. vLLM's engine core stamps its outputs with
# time.monotonic() in its own process; CLOCK_MONOTONIC is one system-wide clock on Linux, so
# those stamps and this process's readings can be subtracted.
CLOCK = time.monotonic


def clock_name() -> str:
    return f"time.{CLOCK.__name__} ({time.get_clock_info(CLOCK.__name__).implementation})"


# What each offline number measures: both runners start and stop their clocks at these events
# (offline.hf_baseline.HFRunner.run_batch and offline.vllm_offline.VLLMRunner.run_batch), and record where their
# token times come from beside these.
TIMING = {
    "clock": clock_name(),
    "start": "before the engine call that takes the prompt text (tokenization included)",
    "ttft_end": "the request's first output token is sampled and on the host",
    "e2el_end": "the request's last output token is sampled and on the host",
    "duration_end": "the call returns every output as text (detokenization included)",
}


def thread_cpus(pid: int | None = None) -> list[int]:
    """The union of the CPUs each thread of a process may run on (vLLM pins its OpenMP threads
    one by one, so the process mask alone would not say where they run)."""
    tasks = Path(f"/proc/{pid or os.getpid()}/task")
    cpus: set[int] = set()
    for task in tasks.iterdir() if tasks.is_dir() else []:
        try:
            cpus |= os.sched_getaffinity(int(task.name))
        except OSError:  # the thread ended while we looked
            continue
    return sorted(cpus)


def child_thread_cpus() -> list[int]:
    """The CPUs the threads of this process's children (vLLM's engine core) may run on."""
    cpus: set[int] = set()
    for child in psutil.Process().children(recursive=True):
        cpus.update(thread_cpus(child.pid))
    return sorted(cpus)
