"""A deterministic reference server: OpenAI-compatible (completions and chat, streamed or not,
usage in the stream), with a known token schedule and vLLM's `/metrics` names. It is the
instrument for testing this pipeline's own code (the client's timing, schedules, repeats and
intervals, the capacity search's decisions, external endpoints and their keys), never a
stand-in for vLLM where vLLM's behaviour is the claim.

The schedule: a request waits for one of `max_num_seqs` slots (waiting, then running), its
first token comes `ttft_ms` after it got its slot, and every later token
`itl_ms + itl_ms_per_running x (requests running)` after the one before (a decode step that
slows as the batch grows, so that a TPOT SLO has a known capacity); it always returns exactly
`max_tokens` tokens. Each running request holds ceil((prompt + generated) / block_size) of
`num_blocks` KV blocks. With prefix caching on, a prompt's whole blocks (short of its last
token) that an earlier prompt filled are counted as hits, as vLLM counts them (decode blocks
are not cached here). Prompts are counted by the model's tokenizer where one is given (chat
through its template, as vLLM does), else one token a word. It runs as two processes in one
group, as vLLM's API server and engine core do.

    python -m infbench.serving.reference_server --port 8000 --served-model-name tiny \\
        --tokenizer resources/models/tiny --ttft-ms 40 --itl-ms 10 --max-num-seqs 8
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from infbench.engines.vllm_server import ServerProcess

TOKEN_TEXT = " a"


@dataclass
class Schedule:
    ttft_ms: float = 40.0
    itl_ms: float = 10.0
    itl_ms_per_running: float = 0.0
    max_num_seqs: int = 8
    num_blocks: int = 1024
    block_size: int = 128
    prefix_caching: bool = False


@dataclass
class State:
    """What /metrics reports: the scheduler's gauges and counters."""

    running: int = 0
    waiting: int = 0
    held_blocks: dict = field(default_factory=dict)
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    cached_blocks: set = field(default_factory=set)


def shared_prefix_blocks(token_ids: list[int], block_size: int, cached: set) -> tuple[int, list[tuple]]:
    """Hits: the prompt's whole blocks already cached, from the start until the first miss, short
    of its last token (always computed); and the keys of every whole block the prompt fills,
    which are cached after it (as vLLM caches every full block)."""
    keys = [tuple(token_ids[: (index + 1) * block_size]) for index in range(len(token_ids) // block_size)]
    hits = 0
    for key in keys[: (len(token_ids) - 1) // block_size]:
        if key not in cached:
            break
        hits += 1
    return hits, keys


def build_app(name: str, schedule: Schedule, tokenizer=None, api_key: str | None = None):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.routing import Route

    state = State()
    slots = asyncio.Semaphore(schedule.max_num_seqs)
    counter = iter(range(1 << 62))

    def authorised(request) -> bool:
        return not api_key or request.headers.get("authorization") == f"Bearer {api_key}"

    def prompt_ids(body: dict, chat: bool) -> list[int]:
        if tokenizer is None:  # no tokenizer: a word is a token
            text = " ".join(m["content"] for m in body["messages"]) if chat else body["prompt"]
            return list(range(len(text.split())))
        if chat:  # as vLLM does: the template as text, then its tokens without added specials
            text = tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=False)
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])
        return list(tokenizer(body["prompt"])["input_ids"])

    def chunk(request_id: str, text: str, chat: bool, finish: str | None) -> dict:
        if chat:
            choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
            return {
                "id": request_id,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": name,
                "choices": [choice],
            }
        choice = {"index": 0, "text": text, "finish_reason": finish}
        return {"id": request_id, "object": "text_completion", "created": 0, "model": name, "choices": [choice]}

    async def generate(request, chat: bool):
        if not authorised(request):
            return JSONResponse({"error": {"message": "Unauthorized"}}, status_code=401)
        body = await request.json()
        if body.get("model") != name:
            return JSONResponse({"error": {"message": f"model {body.get('model')!r} not found"}}, status_code=404)
        ids = prompt_ids(body, chat)
        tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        request_id = f"ref-{next(counter)}"
        usage = {"prompt_tokens": len(ids), "completion_tokens": tokens, "total_tokens": len(ids) + tokens}

        async def run(emit):
            state.waiting += 1
            await slots.acquire()
            state.waiting -= 1
            state.running += 1
            try:
                if schedule.prefix_caching:  # vLLM counts queries and hits only with caching on
                    state.prefix_queries += len(ids)
                    hits, keys = shared_prefix_blocks(ids, schedule.block_size, state.cached_blocks)
                    state.prefix_hits += hits * schedule.block_size
                    state.cached_blocks.update(keys)
                for index in range(tokens):
                    state.held_blocks[request_id] = math.ceil((len(ids) + index + 1) / schedule.block_size)
                    step = schedule.itl_ms + schedule.itl_ms_per_running * state.running
                    await asyncio.sleep((schedule.ttft_ms if index == 0 else step) / 1000)
                    await emit(index)
            finally:
                state.held_blocks.pop(request_id, None)
                state.running -= 1
                slots.release()

        if not body.get("stream"):

            async def nothing(index):
                return None

            await run(nothing)
            text = TOKEN_TEXT * tokens
            if chat:
                message = {"role": "assistant", "content": text}
                choice = {"index": 0, "message": message, "finish_reason": "length"}
                return JSONResponse({"id": request_id, "object": "chat.completion", "created": 0, "model": name,
                                     "choices": [choice], "usage": usage})  # fmt: skip
            choice = {"index": 0, "text": text, "finish_reason": "length"}
            return JSONResponse({"id": request_id, "object": "text_completion", "created": 0, "model": name,
                                 "choices": [choice], "usage": usage})  # fmt: skip

        async def stream():
            queue: asyncio.Queue = asyncio.Queue()

            async def emit(index):
                await queue.put(index)

            task = asyncio.ensure_future(run(emit))
            try:
                for _ in range(tokens):
                    index = await queue.get()
                    if chat and index == 0:  # vLLM's first chat chunk, with the first output, carries the role only
                        role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                        first = {"id": request_id, "object": "chat.completion.chunk", "created": 0, "model": name,
                                 "choices": [role]}  # fmt: skip
                        yield f"data: {json.dumps(first)}\n\n"
                    finish = "length" if index == tokens - 1 else None
                    yield f"data: {json.dumps(chunk(request_id, TOKEN_TEXT, chat, finish))}\n\n"
                await task
                if (body.get("stream_options") or {}).get("include_usage"):
                    final = {
                        "id": request_id,
                        "created": 0,
                        "model": name,
                        "choices": [],
                        "usage": usage,
                    }
                    yield f"data: {json.dumps(final)}\n\n"
                yield "data: [DONE]\n\n"
            finally:
                task.cancel()

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def completions(request):
        return await generate(request, chat=False)

    async def chat_completions(request):
        return await generate(request, chat=True)

    async def models(request):
        if not authorised(request):
            return JSONResponse({"error": {"message": "Unauthorized"}}, status_code=401)
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model"}]})

    async def health(request):
        return PlainTextResponse("")

    async def reset_prefix_cache(request):
        state.cached_blocks.clear()
        return PlainTextResponse("")

    async def metrics(request):
        labels = f'model_name="{name}"'
        usage = sum(state.held_blocks.values()) / schedule.num_blocks
        config = (
            f'block_size="{schedule.block_size}",enable_prefix_caching="{schedule.prefix_caching}",'
            f'num_gpu_blocks="{schedule.num_blocks}"'
        )
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {state.running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {state.waiting}",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{labels}}} {usage}",
            "# TYPE vllm:num_preemptions counter",
            f"vllm:num_preemptions_total{{{labels}}} {state.preemptions}",
            "# TYPE vllm:prefix_cache_queries counter",
            f"vllm:prefix_cache_queries_total{{{labels}}} {state.prefix_queries}",
            "# TYPE vllm:prefix_cache_hits counter",
            f"vllm:prefix_cache_hits_total{{{labels}}} {state.prefix_hits}",
            "# TYPE vllm:cache_config_info gauge",
            f"vllm:cache_config_info{{{config}}} 1.0",
        ]
        return PlainTextResponse("\n".join(lines) + "\n")

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models),
        Route("/health", health),
        Route("/metrics", metrics),
        Route("/reset_prefix_cache", reset_prefix_cache, methods=["POST"]),
    ]
    return Starlette(routes=routes)


def reference_command(
    host: str, port: int, served_name: str, schedule: Schedule, tokenizer: str | None, api_key: str | None
) -> list[str]:
    """The server's command line: every field of the schedule as its flag."""
    command = [sys.executable, "-m", "infbench.serving.reference_server", "--host", host, "--port", str(port)]
    command += ["--served-model-name", served_name]
    for name, value in dataclasses.asdict(schedule).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            command += [flag] if value else []
        else:
            command += [flag, str(value)]
    command += ["--tokenizer", str(tokenizer)] if tokenizer else []
    command += ["--api-key", api_key] if api_key else []
    return command


class ReferenceServer(ServerProcess):
    """The reference server as a process with a server's life cycle (launch, wait until it
    lists its model, stop the whole process group), so it stands where a server would."""

    def __init__(
        self,
        served_name: str,
        log_path: str | Path,
        schedule: Schedule | None = None,
        tokenizer: str | Path | None = None,
        api_key: str | None = None,
        startup_timeout_s: float = 60,
        host: str = "127.0.0.1",
        port: int | None = None,
    ):
        super().__init__(
            served_name, log_path, startup_timeout_s=startup_timeout_s, port=port, host=host, api_key=api_key
        )
        self.schedule = schedule or Schedule()
        self.resets_prefix_cache = self.schedule.prefix_caching
        self.command = reference_command(host, self.port, served_name, self.schedule, tokenizer, api_key)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--tokenizer", help="the model folder whose tokenizer counts prompts")
    parser.add_argument("--api-key")
    parser.add_argument("--ttft-ms", type=float, default=Schedule.ttft_ms)
    parser.add_argument("--itl-ms", type=float, default=Schedule.itl_ms)
    parser.add_argument("--itl-ms-per-running", type=float, default=Schedule.itl_ms_per_running)
    parser.add_argument("--max-num-seqs", type=int, default=Schedule.max_num_seqs)
    parser.add_argument("--num-blocks", type=int, default=Schedule.num_blocks)
    parser.add_argument("--block-size", type=int, default=Schedule.block_size)
    parser.add_argument("--prefix-caching", action="store_true")
    options = parser.parse_args(argv)
    import uvicorn

    tokenizer = None
    if options.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(options.tokenizer)
    schedule = Schedule(
        options.ttft_ms,
        options.itl_ms,
        options.itl_ms_per_running,
        options.max_num_seqs,
        options.num_blocks,
        options.block_size,
        options.prefix_caching,
    )
    app = build_app(options.served_model_name, schedule, tokenizer, options.api_key)
    # A second process in the server's group, as vLLM's engine core is: stopping the server must
    # stop its whole group, and a test can tell when it does not.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(24 * 3600)"])
    started = time.strftime("%H:%M:%S")
    print(f"{started} reference server for {options.served_model_name} on {options.host}:{options.port}", flush=True)
    uvicorn.run(app, host=options.host, port=options.port, log_level="warning")


if __name__ == "__main__":
    main()
