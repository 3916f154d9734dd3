"""A level spread over several client processes, each with its own event loop, its own openai
client and its share of the level (client.split_level), where one process would be the
limit: the level's results are merged in request order and measured with the same metric
definitions as one process's. Every process times against one clock (perf_counter is
CLOCK_MONOTONIC, the same in every process on the machine), so the schedule stays exact
across processes: each request leaves at the level's start plus its scheduled offset.

A worker is `python -m infbench.serving.client_processes`, given its job on stdin and
answering on stdout, pickled: the job; "ready" once its client is made; the level's start;
its results, CPU seconds and the moment its last request ended. A worker that fails stops
the level with one line; every worker is killed when the level ends, whatever ended it.
(A worker cannot hang past its requests' own time limit, server.request_timeout_s.)
"""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import time

from infbench.serving.client import Share, StreamedResult, openai_client, send_share

# A worker's command line.
WORKER = [sys.executable, "-m", "infbench.serving.client_processes"]


def run_shares(
    shares: list[Share], *, base_url: str, model: str, timeout_s: float, api: str, api_key: str | None
) -> tuple[list[StreamedResult], float, float, list[float]]:
    """Each share in a worker of its own, started together once every worker is ready. Returns
    the results in the order of the level's requests, the level's start, its duration (to the
    last request's end in any worker) and each worker's CPU seconds while the level ran (this
    process, which only waits, is not counted)."""
    workers = []
    try:
        for _ in shares:
            workers.append(subprocess.Popen(WORKER, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        for worker, share in zip(workers, shares):
            send(worker, {"share": share, "base_url": base_url, "model": model, "timeout_s": timeout_s,
                          "api": api, "api_key": api_key})  # fmt: skip
        for worker in workers:
            if receive(worker) != "ready":
                raise RuntimeError("a client worker answered out of turn")
        started = time.perf_counter()
        for worker in workers:
            send(worker, started)
        answers = [receive(worker) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait()
    results: list[StreamedResult | None] = [None] * sum(len(share.requests) for share in shares)
    for share, answer in zip(shares, answers):
        for index, result in zip(share.indices, answer["results"], strict=True):
            results[index] = result
    duration = max(answer["ended"] for answer in answers) - started
    return results, started, duration, [answer["cpu_s"] for answer in answers]


def send(worker: subprocess.Popen, message) -> None:
    pickle.dump(message, worker.stdin)
    worker.stdin.flush()


def receive(worker: subprocess.Popen):
    try:
        return pickle.load(worker.stdout)
    except EOFError:
        worker.wait()
        raise RuntimeError(
            f"a client worker stopped (exit status {worker.returncode}) before it answered; its error is above"
        ) from None


async def work(job: dict, inbox, outbox) -> None:
    client = openai_client(job["base_url"], job["timeout_s"], job["api_key"])
    try:
        pickle.dump("ready", outbox)
        outbox.flush()
        started = pickle.load(inbox)
        cpu_started = time.process_time()
        results = await send_share(client, job["model"], job["share"], started, job["api"])
        answer = {"results": results, "cpu_s": time.process_time() - cpu_started, "ended": time.perf_counter()}
    finally:
        await client.close()
    pickle.dump(answer, outbox)
    outbox.flush()


def main() -> None:
    # The pickled answers own stdout; anything a library prints goes to stderr instead.
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inbox = sys.stdin.buffer
    asyncio.run(work(pickle.load(inbox), inbox, outbox))


if __name__ == "__main__":
    main()
