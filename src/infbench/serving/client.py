"""Load generation against an OpenAI-compatible server with the `openai` client.

Timing follows vLLM's benchmark client exactly (vllm/benchmarks/lib/endpoint_request_func.py):
TTFT is the arrival of the first streamed chunk that carries a choice (its text may be
empty), each later such chunk adds an ITL gap, E2E latency ends at the last such chunk,
and the output token count is the server's `usage` (requested in the stream). The openai
client builds and sends each request; its stream is read raw (`http_transport`), each read
stamped on arrival and its events parsed once the stream has ended, so that reading a chunk
costs a timestamp and a split.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
from dataclasses import dataclass, field

import httpx2
import openai

from infbench.core.metrics import RequestResult
from infbench.engines.server_metrics import MetricsScraper, MetricsSeries
from infbench.serving.arrivals import Arrivals, TraceArrivals
from infbench.serving.http_transport import AiohttpTransport, response_chunks


@dataclass
class LoadRequest:
    id: str
    prompt: str
    prompt_tokens: int
    max_tokens: int
    messages: list[dict] | None = None  # the user turn, for /v1/chat/completions


@dataclass
class StreamedResult:
    result: RequestResult
    text: str
    sent_at: float  # perf_counter when the request was sent
    # Open loop: perf_counter when its scheduled time came and the client got to it (the sleep
    # ended); sent_at - ready_at is its wait for a free slot (vLLM's client_queue_time), and
    # spread over client processes, its hand-over to a worker too.
    ready_at: float | None = None
    scheduled_s: float | None = None  # open loop: its send offset in the schedule, from the pass's start
    max_tokens: int | None = None  # the output tokens it asked for


def unix_time(perf_counter_at: float) -> float:
    """A time.perf_counter reading (any process of this boot: it is the monotonic clock) as
    seconds since the epoch, to anchor a pass's relative times for users' own tools."""
    return time.time() - time.perf_counter() + perf_counter_at


APIS = ("completions", "chat")
# The client's event loop is watched by a sleep of this long, again and again (LoopWatch).
LOOP_TICK_S = 0.01


class LoopWatch:
    """The event loop that timestamps every stream, watched: a LOOP_TICK_S sleep taken again and
    again, each wake-up later than a tick noted. Late by a stall, every timestamp taken in it is
    (docs/method.md#client-limited-probes)."""

    def __init__(self):
        self.late: list[tuple[float, float]] = []  # (perf_counter at wake-up, seconds late)
        self.asked = time.perf_counter()  # when the sleep now under way began

    async def run(self) -> None:
        while True:
            self.asked = time.perf_counter()
            await asyncio.sleep(LOOP_TICK_S)
            now = time.perf_counter()
            if now - self.asked - LOOP_TICK_S > LOOP_TICK_S:
                self.late.append((now, now - self.asked - LOOP_TICK_S))

    def latest(self, since: float, until: float) -> float:
        """The latest wake-up in [since, until] (perf_counter), a sleep still under way at
        `until` counted as late as it then was."""
        pending = (until, until - self.asked - LOOP_TICK_S)
        return max((late for at, late in [*self.late, pending] if since <= at <= until and late > 0), default=0.0)


def request_body(model: str, request: LoadRequest, api: str) -> tuple[str, dict]:
    """The path and body of a streamed request, greedy, exactly `max_tokens` long (ignore_eos),
    with the fields vLLM's benchmark client sends for this API and no others: `prompt` and
    `max_tokens` to /v1/completions (its openai backend), `messages` and
    `max_completion_tokens` to /v1/chat/completions (its openai-chat backend), where the server
    applies the model's chat template. ignore_eos alone fixes the length, as in vLLM's client;
    min_tokens or a seed would make the engine run a per-request logits processor or
    generator at every step."""
    common = {"model": model, "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
    if api == "chat":
        body = {"messages": request.messages, "max_completion_tokens": request.max_tokens}
        return "/chat/completions", {**body, **common, "ignore_eos": True}
    return "/completions", {"prompt": request.prompt, "max_tokens": request.max_tokens, **common, "ignore_eos": True}


def sse_events(buffer: bytes, data: bytes) -> tuple[list[bytes], bytes]:
    """The server-sent events that `data` completes after the unfinished `buffer`, and what is
    left unfinished. Events end at a blank line; CRLF line ends are read as LF."""
    data = buffer + data if buffer else data
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    events = data.split(b"\n\n")
    return events, events.pop()


class MalformedStream(ValueError):
    """A reply the client could not read as server-sent events with a choice."""


class StreamError(Exception):
    """An error the server sent inside a streamed reply (vLLM's `{"error": ...}` event)."""


def event_data(event: bytes) -> dict | None:
    """The JSON object of one server-sent event's `data:` lines, None for an event without
    data (a `:` comment) or `[DONE]`, parsed with json.loads as vLLM's client parses it."""
    if event.startswith(b"data: ") and b"\n" not in event:  # one line, as every server sends it
        payload = event[6:].strip()
    else:
        payload = b"\n".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
    if not payload or payload == b"[DONE]":
        return None
    try:
        data = json.loads(payload)
    except ValueError as error:
        raise MalformedStream(f"an event that is not JSON ({error}): {payload[:80]!r}") from None
    if not isinstance(data, dict):
        raise MalformedStream(f"an event that is not a JSON object: {payload[:80]!r}")
    return data


def complete_event(event: bytes) -> bool:
    """Is an event left without its blank line whole? As vLLM's client reads one: its data
    parses (or is [DONE]); a cut-off remainder is left out."""
    if not event.strip():
        return False
    try:
        event_data(event)
    except ValueError:
        return False
    return True


def chunk_text(choice: dict, api: str) -> str:
    """The text a streamed choice carries: `text` (completions) or `delta.content` (chat)."""
    return (choice.get("delta", {}).get("content") if api == "chat" else choice.get("text")) or ""


def streamed_result(request: LoadRequest, api: str, started: float, arrived: list[tuple[float, list[bytes]]]):
    """The request's timing and text from its events, each read's with the time it arrived.
    Every chunk with a choice counts, its text empty or not (the chat endpoint's first chunk
    carries only the role), as in vLLM's client for both APIs."""
    first, latest, itl, text, output_tokens, prompt_tokens = None, started, [], [], None, request.prompt_tokens
    for when, events in arrived:
        for data in filter(None, map(event_data, events)):
            if error := data.get("error"):
                raise StreamError(error.get("message", error) if isinstance(error, dict) else error)
            if data.get("choices"):
                if first is None:
                    first = when
                else:
                    itl.append(when - latest)
                latest = when
                text.append(chunk_text(data["choices"][0], api))
            elif usage := data.get("usage"):
                output_tokens = usage.get("completion_tokens")
                if usage.get("prompt_tokens") is not None:
                    prompt_tokens = usage["prompt_tokens"]
    if first is None:
        raise MalformedStream("never received a chunk with a choice")
    result = RequestResult(request.id, prompt_tokens, output_tokens or 0, first - started, latest - started, itl)
    return StreamedResult(result, "".join(text), started, max_tokens=request.max_tokens)


async def stream_request(
    client: openai.AsyncOpenAI, model: str, request: LoadRequest, api: str = "completions"
) -> StreamedResult:
    """One streamed request, sent by the openai client (`client.post`, which raises on a failed
    status) and read raw: each read of the body is stamped as it arrives and split into its
    events, which are parsed after the last one. The whole request is held to the client's
    timeout. A failed request is a result, not an error."""
    if not isinstance(client, openai.AsyncOpenAI):  # a ClientPool: one of its worker processes streams it
        return await client.stream(model, request, api)
    path, body = request_body(model, request, api)
    started = time.perf_counter()
    arrived, buffer = [], b""
    try:
        async with asyncio.timeout(client.timeout):
            response = await client.post(path, cast_to=httpx2.Response, body=body, stream=True)
            try:
                if response.status_code != 200:  # vLLM's client counts only a 200 a success
                    raise RuntimeError(f"HTTP {response.status_code}")
                async for data in response_chunks(response):
                    now = time.perf_counter()
                    events, buffer = sse_events(buffer, data)
                    arrived.append((now, events))
            finally:
                await response.aclose()
        if complete_event(buffer):  # a last event the server did not end with a blank line
            arrived.append((now, [buffer]))
        return streamed_result(request, api, started, arrived)
    except Exception as error:  # a failed request is data: counted, not fatal
        if isinstance(error, TimeoutError):
            error = TimeoutError(f"no whole answer within {client.timeout} s (server.request_timeout_s)")
        cause = f" ({type(error.__cause__).__name__}: {error.__cause__})" if error.__cause__ else ""
        result = RequestResult(
            request.id, request.prompt_tokens, 0, 0.0, 0.0, [], success=False,
            error=f"{type(error).__name__}: {error}{cause}",
        )  # fmt: skip
        return StreamedResult(result, "", started, max_tokens=request.max_tokens)


def openai_client(base_url: str, timeout_s: float, api_key: str | None = None) -> openai.AsyncOpenAI:
    """The openai client on a transport of one aiohttp session (`http_transport`), the HTTP
    stack vLLM's benchmark client uses, with no connection limit (a level's own concurrency is
    the limit); `timeout_s` is the limit of each whole request (`stream_request`). `api_key`: an
    external endpoint's key (a server this pipeline starts needs none)."""
    return openai.AsyncOpenAI(
        base_url=f"{base_url}/v1",
        api_key=api_key or "not-needed",
        max_retries=0,
        timeout=timeout_s,
        http_client=openai.DefaultAioHttpClient(transport=AiohttpTransport(https=base_url.startswith("https://"))),
    )


@dataclass
class PassWindow:
    """What a windowed pass (serving/window.py) was beyond its counted requests: its window
    (seconds from the pass's start), its end, every request sent, and every one that finished
    (counted or not: the ramp's and the hold's too, as the server's histograms see them)."""

    opened_s: float
    closed_s: float
    ended_s: float
    sent: int
    finished: list[StreamedResult]
    cut_short: bool  # the request supply (or schedule) ran out before the last counted request finished
    # What the server delivered while the window was open, from every request of the pass:
    completed: int  # requests that completed in the window
    completed_prompt_tokens: int  # their prompt tokens
    output_tokens: float  # output tokens that arrived in the window
    cancelled: list[dict] = field(default_factory=list)  # window.cancelled_record of each request cut off

    @property
    def seconds(self) -> float:
        return self.closed_s - self.opened_s

    def to_json(self) -> dict:
        return {
            "opened_s": self.opened_s,
            "closed_s": self.closed_s,
            "seconds": self.seconds,
            "ended_s": self.ended_s,
            "sent": self.sent,
            "finished": len(self.finished),
            "cut_short": self.cut_short,
            "completed_in_window": self.completed,
            "output_tokens_in_window": self.output_tokens,
        }


@dataclass
class LevelRun:
    results: list[StreamedResult]  # the requests measured: a windowed pass's counted ones
    duration_s: float  # what throughput is over: the whole pass, or its window
    metrics: MetricsSeries
    client_cpu_s: float  # every client process's CPU seconds, summed
    scheduled: list[float]  # offered send offsets (open loop); empty for closed loop
    started: float  # perf_counter at the level's start; sends are timed from it
    processes: int = 1  # client processes the level was spread over
    process_cpu_s: list[float] | None = None  # each worker's CPU seconds, then the dispatching process's (None: one)
    window: PassWindow | None = None  # a windowed pass; None: every request of the pass counted
    turns: dict[str, dict] = field(default_factory=dict)  # users in sessions: TurnLog.to_json by request id
    session_start_lags: list[float] | None = None  # sessions on a ramp: each one's first turn's send lag, s
    loop_late_s: float | None = None  # a windowed pass: WindowRun.loop_late_s (None: not watched)

    def window_samples(self) -> list[dict]:
        """The /metrics scrapes the level's server figures are read from: the window's."""
        if self.window is None:
            return self.metrics.samples
        return [s for s in self.metrics.samples if self.window.opened_s <= s["t"] <= self.window.closed_s]


async def send_all(
    client,
    model: str,
    requests: list[LoadRequest],
    scheduled: list[float],
    concurrency: int | None,
    started: float,
    api: str,
) -> list[StreamedResult]:
    """Every request, each sent at `started` + its scheduled offset (at once for a closed loop)
    as soon as one of the `concurrency` slots is free (None: no cap)."""
    gate = asyncio.Semaphore(concurrency) if concurrency is not None else contextlib.nullcontext()

    async def send(request, when):
        await asyncio.sleep(max(0.0, started + when - time.perf_counter()))
        ready = time.perf_counter()
        async with gate:
            streamed = await stream_request(client, model, request, api)
        if scheduled:
            streamed.ready_at, streamed.scheduled_s = ready, when
        return streamed

    offsets = scheduled or [0.0] * len(requests)
    return list(await asyncio.gather(*(send(r, w) for r, w in zip(requests, offsets))))


async def run_level(
    base_url: str,
    model: str,
    requests: list[LoadRequest],
    *,
    concurrency: int | None,
    arrivals: Arrivals | TraceArrivals | None,
    seed: int,
    interval_s: float,
    timeout_s: float,
    api: str = "completions",
    api_key: str | None = None,
    scrape_metrics: bool = True,
    processes: int = 1,
) -> LevelRun:
    """Closed loop (`arrivals` None: `concurrency` requests in flight) or open loop (requests
    sent on the `arrivals` schedule, at most `concurrency` in flight where it is given, as
    vLLM's --max-concurrency), through `api`, from one client process or spread over
    `processes` (client_processes). Without `scrape_metrics` (an endpoint with no /metrics)
    the level's server series is empty."""
    scheduled = [] if arrivals is None else arrivals.offsets(len(requests), seed)
    processes = max(1, min(processes, len(requests), concurrency or processes))
    watch = LoopWatch()
    watcher = asyncio.ensure_future(watch.run())
    try:
        async with pass_client(processes, base_url, timeout_s, api_key, watch) as sender:
            with MetricsScraper(base_url, interval_s, enabled=scrape_metrics) as scraper:
                started = time.perf_counter()
                cpu_started = client_cpu(sender)
                results = await send_all(sender, model, requests, scheduled, concurrency, started, api)
                duration = time.perf_counter() - started
                process_cpu_s = cpu_since(cpu_started, sender)
    finally:
        watcher.cancel()
    late_s = watch.latest(started, started + duration)
    return LevelRun(results, duration, scraper.series(started), sum(process_cpu_s), scheduled, started, processes,
                    process_cpu_s if processes > 1 else None, loop_late_s=late_s)  # fmt: skip


def settle_gc() -> None:
    """Before a pass, in every process it sends from: Python's cyclic garbage collector run now,
    and what survives frozen out of its later scans, so that no full scan of the heap stalls the
    pass's event loop (docs/method.md#client-limited-probes)."""
    gc.collect()
    gc.freeze()


@contextlib.asynccontextmanager
async def pass_client(processes: int, base_url: str, timeout_s: float, api_key: str | None, watch: LoopWatch):
    """What a pass sends through, closed after it: its own openai client, or for `processes`
    over one a ClientPool of that many workers, whose event loops' late wake-ups then join
    `watch` (the pass's loop lateness is the latest of all its processes'). This process's heap
    is settled first (settle_gc; each worker settles its own), before the pass's clock starts."""
    settle_gc()
    if processes == 1:
        client = openai_client(base_url, timeout_s, api_key)
        try:
            yield client
        finally:
            await client.close()
        return
    from infbench.serving.client_processes import ClientPool

    async with ClientPool(processes, base_url, timeout_s, api_key) as pool:
        yield pool
    watch.late.extend(pool.late)


def client_cpu(sender) -> list[float]:
    """The CPU seconds so far of the processes a pass sends through: a ClientPool's workers
    (read from /proc), then this process."""
    workers = [] if isinstance(sender, openai.AsyncOpenAI) else sender.cpu_s()
    return [*workers, time.process_time()]


def cpu_since(started: list[float], sender) -> list[float]:
    """Each of those processes' CPU seconds since `started` (client_cpu then)."""
    return [now - then for then, now in zip(started, client_cpu(sender), strict=True)]


def load_request(row: dict, pass_index: int) -> LoadRequest:
    """A workload row as the client sends it; its id tagged with its place in the pass."""
    return LoadRequest(f"{row['id']}#{pass_index}", row["prompt"], row["prompt_tokens"], row["max_tokens"],
                       row.get("messages"))  # fmt: skip


def cycle_requests(workload: list[dict], count: int) -> list[LoadRequest]:
    """`count` requests from the workload, in order, repeated as needed."""
    return [load_request(workload[i % len(workload)], i) for i in range(count)]


def trace_requests(workload: list[dict]) -> list[LoadRequest]:
    """The workload's trace requests, once each, in the trace's order."""
    return [load_request(r, 0) for r in workload if r.get("kind") == "trace"]
