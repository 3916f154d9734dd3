"""Load generation against an OpenAI-compatible server with the `openai` client.

Timing follows vLLM's benchmark client exactly (vllm/benchmarks/lib/endpoint_request_func.py):
TTFT is the arrival of the first streamed chunk that carries a choice (its text may be
empty), each later such chunk adds an ITL gap, E2E latency ends at the last such chunk,
and the output token count is the server's `usage` (requested in the stream). Chunks are
parsed as vLLM's client parses them (json.loads of each `data:` line), on the same HTTP
stack (aiohttp).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass

import openai

from infbench.core.metrics import RequestResult
from infbench.engines.server_metrics import MetricsScraper, MetricsSeries
from infbench.serving.arrivals import Arrivals, send_offsets


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
    # ended); sent_at - ready_at is its wait for a free slot (vLLM's client_queue_time).
    ready_at: float | None = None


APIS = ("completions", "chat")


def sse_data(line: str) -> dict | None:
    """The JSON object of one server-sent-events line, None for anything else (blank lines,
    `:` comments, `[DONE]`), parsed with json.loads as vLLM's benchmark client parses it."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    return None if payload == "[DONE]" else json.loads(payload)


def streamed_response(client: openai.AsyncOpenAI, model: str, request: LoadRequest, api: str):
    """The streamed request, greedy, exactly `max_tokens` long (ignore_eos), with the fields
    vLLM's benchmark client sends for this API and no others: `prompt` and `max_tokens` to
    /v1/completions (its openai backend), `messages` and `max_completion_tokens` to
    /v1/chat/completions (its openai-chat backend), where the server applies the model's chat
    template. ignore_eos alone fixes the length, as in vLLM's client; min_tokens or a seed
    would make the engine run a per-request logits processor or generator at every step."""
    common = {
        "model": model,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_body": {"ignore_eos": True},
    }
    if api == "chat":
        return client.chat.completions.with_streaming_response.create(
            messages=request.messages, max_completion_tokens=request.max_tokens, **common
        )
    return client.completions.with_streaming_response.create(
        prompt=request.prompt, max_tokens=request.max_tokens, **common
    )


def chunk_text(choice: dict, api: str) -> str:
    """The text a streamed choice carries: `text` (completions) or `delta.content` (chat)."""
    return (choice.get("delta", {}).get("content") if api == "chat" else choice.get("text")) or ""


async def stream_request(
    client: openai.AsyncOpenAI, model: str, request: LoadRequest, api: str = "completions"
) -> StreamedResult:
    """One streamed request. The openai client builds and sends it; its stream's lines are read
    raw and each parsed with json.loads, because building the SDK's typed object for every
    chunk cost 4-5 times the CPU of vLLM's client, taken from the engine where they share
    cores. Every chunk with a choice counts, its text empty or not (the chat endpoint's first
    chunk carries only the role), as in vLLM's client for both APIs."""
    started = time.perf_counter()
    first, latest, itl, text, output_tokens, prompt_tokens = None, started, [], [], None, request.prompt_tokens
    try:
        async with streamed_response(client, model, request, api) as response:
            async for line in response.iter_lines():
                data = sse_data(line)
                if data is None:
                    continue
                if data.get("choices"):
                    now = time.perf_counter()
                    if first is None:
                        first = now
                    else:
                        itl.append(now - latest)
                    latest = now
                    text.append(chunk_text(data["choices"][0], api))
                elif data.get("usage"):
                    output_tokens = data["usage"]["completion_tokens"]
                    prompt_tokens = data["usage"].get("prompt_tokens") or prompt_tokens
        if first is None:
            raise RuntimeError("never received a chunk with a choice")
        result = RequestResult(request.id, prompt_tokens, output_tokens or 0, first - started, latest - started, itl)
    except Exception as error:  # a failed request is data: counted, not fatal
        result = RequestResult(
            request.id, prompt_tokens, 0, 0.0, 0.0, [], success=False, error=f"{type(error).__name__}: {error}"
        )
    return StreamedResult(result, "".join(text), started)


def openai_client(base_url: str, timeout_s: float, api_key: str | None = None) -> openai.AsyncOpenAI:
    """The openai client on its aiohttp transport: the HTTP stack vLLM's benchmark client uses
    (the default httpx one cost about twice its CPU per chunk). Its pool allows 1,000
    connections, more than any level keeps in flight. `api_key`: an external endpoint's key
    (a server this pipeline starts needs none)."""
    return openai.AsyncOpenAI(
        base_url=f"{base_url}/v1",
        api_key=api_key or "not-needed",
        max_retries=0,
        timeout=timeout_s,
        http_client=openai.DefaultAioHttpClient(timeout=timeout_s),
    )


@dataclass
class LevelRun:
    results: list[StreamedResult]
    duration_s: float
    metrics: MetricsSeries
    client_cpu_s: float
    scheduled: list[float]  # offered send offsets (open loop); empty for closed loop
    started: float  # perf_counter at the level's start; sends are timed from it


async def run_level(
    base_url: str,
    model: str,
    requests: list[LoadRequest],
    *,
    concurrency: int | None,
    arrivals: Arrivals | None,
    seed: int,
    interval_s: float,
    timeout_s: float,
    api: str = "completions",
    api_key: str | None = None,
    scrape_metrics: bool = True,
) -> LevelRun:
    """Closed loop (`arrivals` None: `concurrency` requests in flight) or open loop (requests
    sent on the `arrivals` schedule, at most `concurrency` in flight where it is given, as
    vLLM's --max-concurrency), through `api`. Without `scrape_metrics` (an endpoint with no
    /metrics) the level's server series is empty."""
    client = openai_client(base_url, timeout_s, api_key)
    scheduled = [] if arrivals is None else send_offsets(len(requests), arrivals, seed)
    gate = asyncio.Semaphore(concurrency) if concurrency is not None else contextlib.nullcontext()
    try:
        # Entering and leaving the scraper scrape synchronously: nothing is timed then.
        with MetricsScraper(base_url, interval_s, enabled=scrape_metrics) as scraper:
            started = time.perf_counter()
            cpu_started = time.process_time()

            async def send(request, when):
                await asyncio.sleep(max(0.0, started + when - time.perf_counter()))
                ready = time.perf_counter()
                async with gate:
                    streamed = await stream_request(client, model, request, api)
                streamed.ready_at = ready if scheduled else None
                return streamed

            results = await asyncio.gather(*(send(r, w) for r, w in zip(requests, scheduled or [0.0] * len(requests))))
            duration = time.perf_counter() - started
            cpu_s = time.process_time() - cpu_started
    finally:
        await client.close()
    return LevelRun(list(results), duration, scraper.series(started), cpu_s, scheduled, started)


def cycle_requests(workload: list[dict], count: int) -> list[LoadRequest]:
    """`count` requests from the workload, in order, repeated as needed."""
    picked = (workload[i % len(workload)] for i in range(count))
    return [
        LoadRequest(f"{r['id']}#{i}", r["prompt"], r["prompt_tokens"], r["max_tokens"], r.get("messages"))
        for i, r in enumerate(picked)
    ]
