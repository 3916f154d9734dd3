"""`make test`'s slow group in two pytest processes side by side: the tests of the tiny run (the
whole pipeline, run once for them, is most of the group's time) beside every other slow test.
On two cores the group takes about three quarters of its time in one process (docs/run-times.md).
The tiny run's output is written to test-output/slow-tiny-run.log and printed once both are
done; the group fails where either does. Ctrl-C reaches both, and each stops its own servers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

GROUPS = {"tiny run": "slow and not cluster and tiny_run", "other": "slow and not cluster and not tiny_run"}


def main() -> int:
    started = time.monotonic()
    log = Path("test-output/slow-tiny-run.log")
    log.parent.mkdir(exist_ok=True)
    pytest = [sys.executable, "-m", "pytest", *sys.argv[1:], "-m"]
    print(f"== the tiny run's tests in a process of their own: {log} (printed below when done)", flush=True)
    with open(log, "w") as sink:
        tiny = subprocess.Popen([*pytest, GROUPS["tiny run"]], stdout=sink, stderr=subprocess.STDOUT)
        try:
            others = subprocess.call([*pytest, GROUPS["other"]])
            print(f"== the other slow tests took {time.monotonic() - started:.0f} s", flush=True)
            tiny_status = tiny.wait()
        finally:  # Ctrl-C: the terminal sent it to both; wait for the tiny run's to unwind
            tiny.wait()
    print(f"== the tiny run's tests (took {time.monotonic() - started:.0f} s):", flush=True)
    print(log.read_text(), end="", flush=True)
    return others or tiny_status


if __name__ == "__main__":
    sys.exit(main())
