"""A pass spread over several client processes (load.client_processes): `ClientPool` streams
each request in one of its worker processes, each with its own event loop and openai client,
while the pass itself (its schedule, its cap on requests in flight, its window) runs in the
calling process as it does for one. A request goes to the worker with the fewest in flight.
Every process times against one clock (perf_counter is CLOCK_MONOTONIC, the same in every
process on the machine), so a worker's timestamps are the pass's. See
docs/method.md#serving-metrics-arrivals-repeats-the-client.

A worker is `python -m infbench.serving.client_processes`, spoken to in length-prefixed
pickles over its stdin and stdout, written without blocking on either side: the pool's
address first, then ("stream", key, model, request, api) and ("cancel", key), to which it
answers ("done", key, result), and ("close",), to which it answers its event loop's late
wake-ups (LoopWatch). A worker that stops, or holds a request past its time limit, fails the
pass with one line; every worker is killed when the pool closes, whatever closed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from infbench.core.errors import UserError
from infbench.serving.client import LoadRequest, LoopWatch, StreamedResult, openai_client, settle_gc, stream_request

# A worker's command line.
WORKER = [sys.executable, "-m", "infbench.serving.client_processes"]
HEADER = struct.Struct("!I")
# What a worker may take beyond a request's own time limit (server.request_timeout_s, which the
# worker holds it to) before the pass gives up on it.
ANSWER_GRACE_S = 30.0
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def frame(message) -> bytes:
    data = pickle.dumps(message)
    return HEADER.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader):
    size = HEADER.unpack(await reader.readexactly(HEADER.size))[0]
    return pickle.loads(await reader.readexactly(size))


async def pipe_reader(pipe) -> tuple[asyncio.StreamReader, asyncio.ReadTransport]:
    reader = asyncio.StreamReader(limit=2**26)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return reader, transport


class WritePipe(asyncio.Protocol):
    """A pipe written without blocking the event loop: what the other end has not read yet
    waits in the transport's buffer, so two processes writing to each other never both block."""

    def __init__(self):
        self.lost = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc) -> None:
        if not self.lost.done():
            self.lost.set_result(None)


async def pipe_writer(pipe) -> tuple[asyncio.WriteTransport, WritePipe]:
    return await asyncio.get_running_loop().connect_write_pipe(WritePipe, pipe)


def cpu_seconds(pid: int) -> float:
    """A process's user and system CPU seconds so far (/proc/<pid>/stat, in clock ticks)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        raise RuntimeError("a client worker stopped before its pass ended; its error is above") from None
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass
class Worker:
    process: subprocess.Popen
    reader: asyncio.StreamReader | None = None
    pipes: list[asyncio.BaseTransport] = field(default_factory=list)  # its stdout's and stdin's
    writer: asyncio.WriteTransport | None = None
    pending: dict[int, asyncio.Future] = field(default_factory=dict)
    closed: asyncio.Future | None = None  # its ("close",) answer: its late wake-ups

    def send(self, message) -> None:
        if self.writer.is_closing() or self.process.poll() is not None:
            raise self.stopped()
        self.writer.write(frame(message))

    def stopped(self) -> RuntimeError:
        status = self.process.poll()
        how = f"exit status {status}" if status is not None else "its output closed"
        return RuntimeError(f"a client worker stopped ({how}) before it answered; its error is above")


class ClientPool:
    """`processes` client worker processes, started by `async with`, each with an openai client
    on `base_url`; `stream` sends one request through the least busy. `cpu_s()` reads each
    worker's CPU seconds so far (the pass takes them at its start and end). On leaving, the
    workers' event loops' late wake-ups (LoopWatch.late) are in `late`, for the caller's watch:
    a pass's loop lateness is the latest of all its processes'. A worker that stops fails the
    requests it holds and calls `on_stop` with the error (a pass waiting on its own events
    ends on it)."""

    def __init__(self, processes: int, base_url: str, timeout_s: float, api_key: str | None):
        if not Path("/proc/self/stat").exists():
            raise UserError(
                "load.client_processes over 1 reads each client process's CPU time from /proc, which this "
                "system lacks: set load.client_processes to 1 (or auto)"
            )
        self.count, self.job = processes, {"base_url": base_url, "timeout_s": timeout_s, "api_key": api_key}
        self.answer_s = timeout_s + ANSWER_GRACE_S
        self.workers: list[Worker] = []
        self.keys = itertools.count()
        self.readers: list[asyncio.Task] = []
        self.late: list[tuple[float, float]] = []
        self.on_stop: Callable[[Exception], None] | None = None
        self.error: RuntimeError | None = None  # the first worker that stopped

    async def __aenter__(self) -> ClientPool:
        try:
            for _ in range(self.count):
                process = subprocess.Popen(WORKER, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                self.workers.append(Worker(process))
            for worker in self.workers:
                worker.reader, reading = await pipe_reader(worker.process.stdout)
                worker.writer, _ = await pipe_writer(worker.process.stdin)
                worker.pipes = [reading, worker.writer]
                worker.send(self.job)
            for worker in self.workers:
                if await asyncio.wait_for(self.answer(worker), self.answer_s) != ("ready",):
                    raise RuntimeError("a client worker answered out of turn")
                worker.closed = asyncio.get_running_loop().create_future()
                self.readers.append(asyncio.ensure_future(self.read(worker)))
        except BaseException:
            self.kill()
            raise
        return self

    def cpu_s(self) -> list[float]:
        if self.error is not None:
            raise RuntimeError(*self.error.args)
        return [cpu_seconds(worker.process.pid) for worker in self.workers]

    async def answer(self, worker: Worker):
        try:
            return await read_frame(worker.reader)
        except (asyncio.IncompleteReadError, EOFError):
            with contextlib.suppress(subprocess.TimeoutExpired):  # its output closed: it is ending
                await asyncio.to_thread(worker.process.wait, 5)
            raise worker.stopped() from None

    async def read(self, worker: Worker) -> None:
        """Hand each answer of `worker` to its waiting request, until it closes or stops."""
        try:
            while True:
                message = await self.answer(worker)
                if message[0] == "closed":
                    worker.closed.set_result(message[1])
                    return
                future = worker.pending.pop(message[1], None)
                if future is not None and not future.done():
                    future.set_result(message[2])
        except Exception as error:  # noqa: BLE001 - whatever stopped the reader fails what waits on it
            self.fail(worker, error if isinstance(error, RuntimeError) else RuntimeError(f"a client worker: {error}"))

    def fail(self, worker: Worker, error: RuntimeError) -> None:
        for future in worker.pending.values():
            if not future.done():  # an error of its own each: one raised in many tasks upsets CPython 3.11's compiler
                future.set_exception(RuntimeError(*error.args))
        worker.pending.clear()
        if worker.closed is not None and not worker.closed.done():
            worker.closed.set_exception(RuntimeError(*error.args))
            worker.closed.exception()  # raised where awaited; not an unretrieved error where not
        self.error = self.error or error
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
            return await asyncio.wait_for(asyncio.shield(future), self.answer_s)
        except TimeoutError:
            error = RuntimeError(f"a client worker held a request over {self.answer_s:.0f} s without answering")
            worker.pending.pop(key, None)
            self.fail(worker, error)
            raise error from None
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
                    self.late.extend(await asyncio.wait_for(worker.closed, self.answer_s))
        finally:
            self.kill()

    def kill(self) -> None:
        for reader in self.readers:
            reader.cancel()
        for worker in self.workers:
            for pipe in worker.pipes:  # closing a transport closes its pipe; nothing left to write matters
                # A pipe its worker's exit ended is closed already (a read pipe without saying so).
                with contextlib.suppress(AttributeError):
                    if not pipe.is_closing():
                        pipe.abort() if isinstance(pipe, asyncio.WriteTransport) else pipe.close()
            if worker.process.poll() is None:
                worker.process.kill()
            worker.process.wait()
            if not worker.pipes:  # never handed to the event loop
                worker.process.stdin.close()
                worker.process.stdout.close()


async def work(inbox: asyncio.StreamReader, outbox: asyncio.WriteTransport) -> None:
    """A worker: stream what it is asked, answer each request as it finishes."""

    def answer(message) -> None:
        outbox.write(frame(message))

    job = await read_frame(inbox)
    client = openai_client(job["base_url"], job["timeout_s"], job["api_key"])
    settle_gc()
    watch = LoopWatch()
    watcher = asyncio.ensure_future(watch.run())
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
    answer(("closed", watch.late))


async def main_async() -> None:
    # The pickled answers own stdout; anything a library prints goes to stderr instead.
    outbox, pipe = await pipe_writer(os.fdopen(os.dup(1), "wb"))
    os.dup2(2, 1)
    try:
        await work((await pipe_reader(sys.stdin.buffer))[0], outbox)
    finally:
        outbox.close()
        await pipe.lost  # every answer written before the process ends


if __name__ == "__main__":
    asyncio.run(main_async())
