"""The client reads streams with long lines whole: line readers with a limit stop at 64-128 KB
(aiohttp before 3.14: "Chunk too big", vLLM issue 39963, SGLang PR 6737); ours must not,
whatever a chunk carries. And a stream that stalls ends at the request's time limit."""

import asyncio
import json
import time

import pytest
from inprocess import InProcessServer
from starlette.responses import StreamingResponse
from starlette.routing import Route
from timing import SchedulingJitter

from infbench.serving.client import LoadRequest, openai_client, stream_request

LONG_CHUNK_CHARS = 400_000  # one server-sent event's line: three times aiohttp's 128 KB limit


class LongChunkServer(InProcessServer):
    """/v1/completions streaming three chunks, the middle one a single 400 KB line; with
    `stall_s`, the first chunk and then nothing for that long."""

    def __init__(self, stall_s: float = 0.0):
        self.stall_s = stall_s

    def routes(self) -> list:
        return [Route("/v1/completions", self.completions, methods=["POST"])]

    async def completions(self, request):
        await request.json()

        async def stream():
            for text in ("a", "b" * LONG_CHUNK_CHARS, "c"):
                chunk = {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                         "choices": [{"index": 0, "text": text, "finish_reason": None}]}  # fmt: skip
                yield f"data: {json.dumps(chunk)}\n\n"
                await asyncio.sleep(self.stall_s or 0.01)
            usage = {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
            yield f"data: {json.dumps({'id': 'x', 'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")


HELLO = LoadRequest("r#0", "hello", 4, 3)


async def one(base_url, timeout_s=30, request=HELLO):
    client = openai_client(base_url, timeout_s)
    try:
        return await stream_request(client, "m", request)
    finally:
        await client.close()


def test_a_chunk_longer_than_aiohttps_line_limit_is_read_whole():
    with LongChunkServer() as server:
        streamed = asyncio.run(one(server.base_url))
    assert streamed.result.success, streamed.result.error
    assert streamed.text == "a" + "b" * LONG_CHUNK_CHARS + "c"
    assert (streamed.result.output_tokens, len(streamed.result.itl)) == (3, 2)


def test_the_same_stream_breaks_a_line_limited_reader():
    """The planted fault: reading the stream line by line with a 64 KB line limit (asyncio's
    StreamReader default; aiohttp before 3.14 failed the same way at 128 KB) fails on this
    server's long line, so the test above can fail."""
    import pytest

    async def by_lines(base_url):
        host, port = base_url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))  # limit: 64 KB a line
        body = json.dumps({"model": "m", "prompt": "hello", "max_tokens": 3, "stream": True})
        writer.write(
            f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}".encode()
        )
        try:
            while await reader.readline():
                pass
        finally:
            writer.close()

    with LongChunkServer() as server, pytest.raises(ValueError, match="limit"):
        asyncio.run(by_lines(server.base_url))


def test_a_stalled_stream_fails_at_the_requests_time_limit_and_says_which_setting():
    with LongChunkServer(stall_s=3.0) as server:
        started = time.perf_counter()
        streamed = asyncio.run(one(server.base_url, timeout_s=0.5))
        waited = time.perf_counter() - started
    assert not streamed.result.success and "server.request_timeout_s" in streamed.result.error
    assert waited < 2.5  # it gave up at its limit, not when the server went on


# Idle costs over the schedule: the first token's (sending a 190 KB body, the server parsing
# it and counting its 32,000 words: 47-57 ms measured) and each later token's (the server's
# and the client's work a chunk: 0.2-0.3 ms measured on the median gap).
FIRST_TOKEN_COST_S = 0.1
TOKEN_COST_S = 0.0005


@pytest.mark.slow  # starts the reference server
def test_a_full_context_prompt_and_a_long_output_keep_their_timings(tmp_path):
    """A prompt of a 32k-context model's whole window (32,000 words, about 190 KB in the body)
    and 2,000 output tokens 2 ms apart, on the reference server: every token is timed (one gap
    a chunk after the first), and the median gap is the schedule's, so a long stream costs the
    client no timing: late by no more than a chunk's own cost and, its timer being one wake,
    the probe's 90th-percentile wake measured alongside (median gap 2.2-2.3 ms idle and with
    three busy loops on 2 cores)."""
    import statistics

    from infbench.serving.reference_server import ReferenceServer, Schedule

    prompt = " ".join(["token"] * 32_000)
    request = LoadRequest("r#0", prompt, 32_000, 2_000)
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=50, itl_ms=2)) as server:
        with SchedulingJitter() as jitter:
            streamed = asyncio.run(stream_request(openai_client(server.base_url, 60), "m", request))
    result = streamed.result
    assert result.success, result.error
    assert (result.prompt_tokens, result.output_tokens, len(result.itl)) == (32_000, 2_000, 1_999)
    assert 0.05 <= result.ttft < 0.05 + jitter.allowance(FIRST_TOKEN_COST_S, wakes=4), (result.ttft, jitter)
    median_gap = statistics.median(result.itl)
    assert 0.002 <= median_gap < 0.002 + TOKEN_COST_S * jitter.slowness + jitter.quantile(0.9), (median_gap, jitter)
