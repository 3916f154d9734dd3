"""What the load client costs, measured on the reference server, whose own timing is known:
CPU seconds per request and per streamed chunk, and the TTFT the client itself adds. The same
harness runs this pipeline's client and vLLM's benchmark client's request function
(`vllm bench serve`'s own, on a session set up as it sets one up), so the two can be compared
side by side (`scripts/bench_client_cost.py`), and gives this machine's client ceiling.

The client's CPU model, fitted from two stream phases of one client process with the same
n requests and c in flight, their outputs T and 5 T tokens long (K_T and K_5T chunks with a
choice in all, CPU seconds cpu_T and cpu_5T):

    b = (cpu_5T - cpu_T) / (K_5T - K_T)      CPU seconds per streamed chunk
    a = cpu_T / n - b K_T / n                CPU seconds per request, its chunks aside

and its first byte from a third phase: the median TTFT of requests of one output token, one
at a time, on a server that answers at once (what the client adds to every TTFT).

A level sending requests at r/s and receiving chunks at k/s keeps the client busy for
a r + b k seconds a second, its share of one core; one process sustains at most
1 / b chunks/s (or 1 / a requests/s) on a whole core, its ceiling.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from infbench.serving.client import LoadRequest, openai_client, stream_request
from infbench.serving.reference_server import ReferenceServer, Schedule

MODEL = "reference"
PROMPT = "the quick brown fox jumps over the lazy dog " * 8
# The reference server's schedule: no time of its own before the first token, a token every
# 5 ms, no slot limit that a phase reaches.
SCHEDULE = Schedule(ttft_ms=0.0, itl_ms=5.0, max_num_seqs=1024, num_blocks=1 << 20)
# The serve stage's calibration: each stream phase one wave of requests (about 6,000 chunks/s),
# three rounds in about 3 s.
CALIBRATION = {"rounds": 3, "requests": 32, "output_tokens": 16, "concurrency": 32}
# A noisy fit can come out at or below zero; a microsecond floor keeps the ceilings finite.
FLOOR_S = 1e-6


@dataclass
class Phase:
    """One phase of one client: its requests, chunks with a choice, CPU and wall time, and the
    median TTFT it measured."""

    requests: int
    chunks: int
    cpu_s: float
    wall_s: float
    median_ttft_s: float
    failed: int


@dataclass
class ClientCost:
    """The fitted model of one client on one machine (see the module's docstring)."""

    cpu_per_request_s: float  # a
    cpu_per_chunk_s: float  # b
    first_byte_ms: float  # the median TTFT on a server that answers at once, one request at a time
    requests: int  # n of the stream phases
    output_tokens: int  # T of the shorter stream phase
    concurrency: int  # c of the stream phases

    @property
    def chunk_ceiling(self) -> float:
        return 1 / self.cpu_per_chunk_s

    @property
    def request_ceiling(self) -> float:
        return 1 / self.cpu_per_request_s

    def load_share(self, request_rate: float, chunk_rate: float) -> float:
        """The share of one core the client needs at these rates: a r + b k."""
        return self.cpu_per_request_s * request_rate + self.cpu_per_chunk_s * chunk_rate

    def to_json(self) -> dict:
        return {**asdict(self), "chunk_ceiling": self.chunk_ceiling, "request_ceiling": self.request_ceiling}


def requests_of(count: int, output_tokens: int) -> list[LoadRequest]:
    return [LoadRequest(f"cost-{i}", PROMPT, len(PROMPT.split()), output_tokens) for i in range(count)]


@contextlib.asynccontextmanager
async def ours(base_url: str):
    """This pipeline's client: a function from a request to (TTFT, chunks with a choice, success)."""
    client = openai_client(base_url, 600)

    async def send(request):
        result = (await stream_request(client, MODEL, request)).result
        return result.ttft, len(result.itl) + 1 if result.success else 0, result.success

    try:
        yield send
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def vllms(base_url: str):
    """vLLM's benchmark client: its request function for the openai backend, on an aiohttp
    session made as `vllm bench serve` makes it (vllm/benchmarks/serve.py; its connection limit
    is the level's concurrency, here no limit), the same body fields as ours (greedy,
    ignore_eos)."""
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncInput, async_request_openai_completions

    connector = aiohttp.TCPConnector(
        limit=0, ttl_dns_cache=300, use_dns_cache=True, keepalive_timeout=60, enable_cleanup_closed=True,
        force_close=False,
    )  # fmt: skip
    session = aiohttp.ClientSession(connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 3600))

    async def send(request):
        given = RequestFuncInput(
            prompt=request.prompt,
            api_url=f"{base_url}/v1/completions",
            prompt_len=request.prompt_tokens,
            output_len=request.max_tokens,
            model=MODEL,
            extra_body={"ignore_eos": True, "temperature": 0.0},
        )
        output = await async_request_openai_completions(given, session)
        return output.ttft, len(output.itl) + 1 if output.success else 0, output.success

    try:
        yield send
    finally:
        await session.close()


def run_phase(client, base_url: str, requests: list[LoadRequest], concurrency: int) -> Phase:
    """One phase in a fresh event loop: the client made, one untimed request (its connection and
    first-call costs stay out, as vLLM's client sends one request before it times), garbage
    collected, then the phase's requests timed, `concurrency` in flight."""

    async def timed():
        async with client(base_url) as send:
            await send(requests[0])
            gate = asyncio.Semaphore(concurrency)

            async def one(request):
                async with gate:
                    return await send(request)

            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            outcomes = await asyncio.gather(*(one(r) for r in requests))
            return outcomes, time.process_time() - cpu, time.perf_counter() - wall

    outcomes, cpu_s, wall_s = asyncio.run(timed())
    done = [o for o in outcomes if o[2]]
    ttft = statistics.median(o[0] for o in done) if done else float("nan")
    return Phase(len(requests), sum(o[1] for o in done), cpu_s, wall_s, ttft, len(outcomes) - len(done))


def fit_cost(first_byte: Phase, short: Phase, long: Phase, output_tokens: int, concurrency: int) -> ClientCost:
    """a and b from the two stream phases, the first byte from the third (the module's
    docstring)."""
    per_chunk = (long.cpu_s - short.cpu_s) / (long.chunks - short.chunks)
    per_request = short.cpu_s / short.requests - per_chunk * short.chunks / short.requests
    return ClientCost(
        per_request, per_chunk, first_byte.median_ttft_s * 1000, short.requests, output_tokens, concurrency
    )


def measure_round(client, base_url: str, *, requests: int, output_tokens: int, concurrency: int):
    """The three phases of one client, and the model fitted from them."""
    phases = (
        run_phase(client, base_url, requests_of(requests, 1), 1),
        run_phase(client, base_url, requests_of(requests, output_tokens), concurrency),
        run_phase(client, base_url, requests_of(requests, 5 * output_tokens), concurrency),
    )
    failed = sum(phase.failed for phase in phases)
    if failed:
        raise RuntimeError(f"{failed} requests to the reference server failed")
    return phases, fit_cost(*phases, output_tokens, concurrency)


def reference_server(log_path: str | Path) -> ReferenceServer:
    return ReferenceServer(MODEL, log_path, SCHEDULE)


def calibrate(log_path: str | Path, progress=print) -> dict:
    """This machine's client ceiling: the client's model (a, b, first byte) fitted in
    CALIBRATION's rounds on the reference server, each figure the median over rounds."""
    rounds = []
    with reference_server(log_path) as server:
        for _ in range(CALIBRATION["rounds"]):
            _, cost = measure_round(
                ours, server.base_url, requests=CALIBRATION["requests"],
                output_tokens=CALIBRATION["output_tokens"], concurrency=CALIBRATION["concurrency"],
            )  # fmt: skip
            rounds.append(cost)
    median = ClientCost(
        max(statistics.median(c.cpu_per_request_s for c in rounds), FLOOR_S),
        max(statistics.median(c.cpu_per_chunk_s for c in rounds), FLOOR_S),
        statistics.median(c.first_byte_ms for c in rounds),
        CALIBRATION["requests"],
        CALIBRATION["output_tokens"],
        CALIBRATION["concurrency"],
    )
    progress(
        f"client ceiling: {median.cpu_per_request_s * 1e6:.0f} us a request, {median.cpu_per_chunk_s * 1e6:.1f} us "
        f"a chunk ({median.chunk_ceiling:.0f} chunks/s on one core), first byte {median.first_byte_ms:.2f} ms"
    )
    return {**median.to_json(), "rounds": [c.to_json() for c in rounds]}


def cost_of(calibration: dict) -> ClientCost:
    """The model back from its record."""
    return ClientCost(**{name: calibration[name] for name in ClientCost.__dataclass_fields__})
