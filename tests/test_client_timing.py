"""The load client's timing against a server whose timing is known (an in-process variant of
infbench.serving.reference_server that also counts events and answers /metrics slowly): an
OpenAI-compatible endpoint that streams each token at a fixed time after the request
arrives, and a `/metrics` page that is slow to answer. vLLM cannot serve as the reference
here: its own latencies are what a test could not tell apart from the client's."""

import asyncio
import gc
import json
import time
import weakref

from inprocess import InProcessServer
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

from infbench.serving.client import LoadRequest, run_level

FIRST_TOKEN_S = 0.3  # the reference server sends the first token this long after a request arrives
TOKEN_GAP_S = 0.05
SLOW_SCRAPE_S = 0.6  # every /metrics answer takes this long


class ScheduledStreamServer(InProcessServer):
    """Streams `max_tokens` chunks on a fixed schedule; counts preemption 'events' at the first
    request's arrival and just before the last chunk of the level's last request, so that a
    counter delta that misses the level's first or last moment reads low."""

    def __init__(self, requests_per_level: int):
        self.requests_per_level = requests_per_level
        self.arrived = 0
        self.finished = 0
        self.events = 0
        self.scrapes_started: list[float] = []

    def routes(self) -> list:
        return [Route("/v1/completions", self.completions, methods=["POST"]), Route("/metrics", self.metrics)]

    async def completions(self, request):
        body = await request.json()
        self.arrived += 1
        if self.arrived == 1:
            self.events += 1
        tokens = body["max_tokens"]

        async def stream():
            await asyncio.sleep(FIRST_TOKEN_S)
            for index in range(tokens):
                if index:
                    await asyncio.sleep(TOKEN_GAP_S)
                if index == tokens - 1 and self.finished == self.requests_per_level - 1:
                    self.events += 1
                chunk = {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                         "choices": [{"index": 0, "text": " a", "finish_reason": None}]}  # fmt: skip
                yield f"data: {json.dumps(chunk)}\n\n"
            self.finished += 1
            counts = {"prompt_tokens": 4, "completion_tokens": tokens, "total_tokens": 4 + tokens}
            usage = {"id": "x", "object": "text_completion", "created": 0, "model": "m", "choices": [], "usage": counts}
            yield f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def metrics(self, request):
        self.scrapes_started.append(time.perf_counter())
        await asyncio.sleep(SLOW_SCRAPE_S)
        return PlainTextResponse(
            "# TYPE vllm:num_preemptions counter\n"
            f'vllm:num_preemptions_total{{model_name="m"}} {float(self.events)}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="m"}} {float(self.arrived - self.finished)}\n'
        )


def level(server: ScheduledStreamServer, requests: int, interval_s: float, tokens: int = 8):
    batch = [LoadRequest(f"r{i}", "hello", 4, tokens) for i in range(requests)]
    return asyncio.run(
        run_level(
            server.base_url,
            "m",
            batch,
            concurrency=requests,
            arrivals=None,
            seed=0,
            interval_s=interval_s,
            timeout_s=30,
        )
    )


def test_a_slow_scrape_during_a_level_does_not_shift_the_streams_timestamps():
    with ScheduledStreamServer(requests_per_level=2) as server:
        # A scrape starts every 0.1 s and each takes 0.6 s: scrapes are in flight during the
        # whole level, including when the first token and every later token arrive.
        run = level(server, requests=2, interval_s=0.1)
        during = [t for t in server.scrapes_started if run.started < t < run.started + run.duration_s]
    assert during, "no scrape ran during the level: the test would prove nothing"
    for streamed in run.results:
        result = streamed.result
        assert result.success and result.output_tokens == 8
        # A scrape on the timing loop would delay a chunk's timestamp by up to SLOW_SCRAPE_S; a
        # busy machine adds its own delay (0.21 s to a first token once, in a slow hour): the
        # bound is half a scrape.
        slack = SLOW_SCRAPE_S / 2
        assert FIRST_TOKEN_S - 0.05 <= result.ttft < FIRST_TOKEN_S + slack
        assert max(result.itl) < TOKEN_GAP_S + slack
        assert FIRST_TOKEN_S + 7 * TOKEN_GAP_S - 0.05 <= result.e2el < FIRST_TOKEN_S + 7 * TOKEN_GAP_S + slack


def test_counter_deltas_include_the_first_and_last_moments_of_a_level():
    with ScheduledStreamServer(requests_per_level=2) as server:
        # A periodic scrape never fires in this short level: only the scrapes that bound it see
        # the event at the first request's arrival and the one at the last chunk.
        run = level(server, requests=2, interval_s=60.0)
    first, last = run.metrics.first_last("vllm:num_preemptions_total")
    assert (first, last) == (0.0, 2.0)


class Cycle:
    def __init__(self):
        self.itself = self


def test_a_level_collects_and_freezes_the_heap_before_it_starts():
    """What lived before a level is out of the collector's scans while it runs, and garbage
    cycles made before it are gone: a full scan of the heap mid-level is a stall of its timing
    loop (docs/method.md#client-limited-probes). The automatic collector is off here, so that
    only the level's own collection can free the cycle."""
    gc.unfreeze()  # what earlier levels in this process froze
    kept = [[index] for index in range(100_000)]
    cycle = Cycle()
    gone = weakref.ref(cycle)
    del cycle
    gc.disable()
    try:
        with ScheduledStreamServer(requests_per_level=1) as server:
            run = level(server, requests=1, interval_s=60.0, tokens=2)
        assert run.results[0].result.success
        assert gone() is None
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.enable()
        gc.unfreeze()
