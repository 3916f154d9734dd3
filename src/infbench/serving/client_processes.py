"""A pass spread over several client processes (load.client_processes): `ClientPool` streams
each request in one of its worker processes, each with its own event loop and openai client,
while the pass itself (its schedule, its cap on requests in flight, its window) runs in the
calling process as it does for one. A request goes to the worker with the fewest in flight.
Every process times against one clock (perf_counter is CLOCK_MONOTONIC, the same in every
process on the machine), so a worker's timestamps are the pass's. See
docs/method.md#serving-metrics-arrivals-repeats-the-client.

A worker is `python -m infbench.serving.client_processes`, spoken to in length-prefixed
pickles: the pool's address first, then ("stream", key, model, request, api) and
("cancel", key) to which it answers ("done", key, result), and ("close",) to which it answers
its CPU seconds and its event loop's late wake-ups (LoopWatch). A worker that stops fails
the pass with one line; every worker is killed when the pool closes, whatever closed it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import pickle
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from infbench.serving.client import LoadRequest, LoopWatch, StreamedResult, openai_client, stream_request

# A worker's command line.
WORKER = [sys.executable, "-m", "infbench.serving.client_processes"]
HEADER = struct.Struct("!I")


def frame(message) -> bytes:
    data = pickle.dumps(message)
    return HEADER.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader):
    size = HEADER.unpack(await reader.readexactly(HEADER.size))[0]
    return pickle.loads(await reader.readexactly(size))


async def pipe_reader(pipe) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=2**26)
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return reader


@dataclass
class Worker:
    process: subprocess.Popen
    reader: asyncio.StreamReader | None = None
    pending: dict[int, asyncio.Future] = field(default_factory=dict)
    closed: asyncio.Future | None = None  # its ("close",) answer: (CPU seconds, late wake-ups)

    def send(self, message) -> None:
        try:
            self.process.stdin.write(frame(message))
            self.process.stdin.flush()
        except BrokenPipeError:
            raise self.stopped() from None

    def stopped(self) -> RuntimeError:
        return RuntimeError(
            f"a client worker stopped (exit status {self.process.wait()}) before it answered; its error is above"
        )


class ClientPool:
    """`processes` client worker processes, started by `async with`, each with an openai client
    on `base_url`; `stream` sends one request through the least busy. On leaving, each worker's
    CPU seconds over the pool's life are in `process_cpu_s` and its event loop's late wake-ups
    (LoopWatch.late) in `late`, for the caller's watch: a pass's loop lateness is the latest of
    all its processes'. A worker that stops fails the requests it holds and calls `on_stop`
    with the error (a pass that waits on its own events ends on it)."""

    def __init__(self, processes: int, base_url: str, timeout_s: float, api_key: str | None):
        self.count, self.job = processes, {"base_url": base_url, "timeout_s": timeout_s, "api_key": api_key}
        self.workers: list[Worker] = []
        self.keys = itertools.count()
        self.readers: list[asyncio.Task] = []
        self.process_cpu_s: list[float] = []
        self.late: list[tuple[float, float]] = []
        self.on_stop: Callable[[Exception], None] | None = None

    async def __aenter__(self) -> ClientPool:
        try:
            for _ in range(self.count):
                process = subprocess.Popen(WORKER, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                self.workers.append(Worker(process))
            for worker in self.workers:
                worker.reader = await pipe_reader(worker.process.stdout)
                worker.send(self.job)
            for worker in self.workers:
                if await self.answer(worker) != ("ready",):
                    raise RuntimeError("a client worker answered out of turn")
                worker.closed = asyncio.get_running_loop().create_future()
                self.readers.append(asyncio.ensure_future(self.read(worker)))
        except BaseException:
            self.kill()
            raise
        return self

    async def answer(self, worker: Worker):
        try:
            return await read_frame(worker.reader)
        except (asyncio.IncompleteReadError, EOFError):
            raise worker.stopped() from None

    async def read(self, worker: Worker) -> None:
        """Hand each answer of `worker` to its waiting request, until it closes or stops."""
        try:
            while True:
                message = await self.answer(worker)
                if message[0] == "closed":
                    worker.closed.set_result(message[1:])
                    return
                future = worker.pending.pop(message[1], None)
                if future is not None and not future.done():
                    future.set_result(message[2])
        except RuntimeError as error:
            for future in [*worker.pending.values(), worker.closed]:
                if (
                    not future.done()
                ):  # an error of its own each: one raised in many tasks upsets CPython 3.11's compiler
                    future.set_exception(RuntimeError(*error.args))
            worker.pending.clear()
            if self.on_stop is not None:
                self.on_stop(error)

    async def stream(self, model: str, request: LoadRequest, api: str) -> StreamedResult:
        worker = min(self.workers, key=lambda w: len(w.pending))
        if worker.closed.done():  # it stopped: its error
            worker.closed.result()
        key = next(self.keys)
        future = worker.pending[key] = asyncio.get_running_loop().create_future()
        worker.send(("stream", key, model, request, api))
        try:
            return await future
        except asyncio.CancelledError:
            if worker.pending.pop(key, None) is not None and worker.process.poll() is None:
                worker.send(("cancel", key))
            raise

    async def __aexit__(self, *exc) -> None:
        try:
            if exc[0] is None:
                for worker in self.workers:
                    worker.send(("close",))
                for worker in self.workers:
                    cpu_s, late = await worker.closed
                    self.process_cpu_s.append(cpu_s)
                    self.late.extend(late)
        finally:
            for reader in self.readers:
                reader.cancel()
            self.kill()

    def kill(self) -> None:
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.kill()
            worker.process.wait()


async def work(inbox: asyncio.StreamReader, outbox) -> None:
    """A worker: stream what it is asked, answer each request as it finishes."""

    def answer(message) -> None:
        outbox.write(frame(message))
        outbox.flush()

    job = await read_frame(inbox)
    client = openai_client(job["base_url"], job["timeout_s"], job["api_key"])
    watch = LoopWatch()
    watcher = asyncio.ensure_future(watch.run())
    cpu_started = time.process_time()
    tasks: dict[int, asyncio.Task] = {}

    async def one(key, model, request, api):
        streamed = await stream_request(client, model, request, api)
        tasks.pop(key, None)
        answer(("done", key, streamed))

    answer(("ready",))
    try:
        while (message := await read_frame(inbox))[0] != "close":
            if message[0] == "stream":
                tasks[message[1]] = asyncio.ensure_future(one(*message[1:]))
            elif (task := tasks.pop(message[1], None)) is not None:
                task.cancel()
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
    finally:
        watcher.cancel()
        await client.close()
    answer(("closed", time.process_time() - cpu_started, watch.late))


async def main_async() -> None:
    # The pickled answers own stdout; anything a library prints goes to stderr instead.
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    await work(await pipe_reader(sys.stdin.buffer), outbox)


if __name__ == "__main__":
    asyncio.run(main_async())
