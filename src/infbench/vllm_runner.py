"""vLLM offline inference (`vllm.LLM`) on the shared scenarios, greedy with a fixed output
length (ignore_eos), per-request TTFT/TPOT from RequestOutput.metrics."""

from __future__ import annotations

import math
import time

from infbench.metrics import RequestResult
from infbench.offline_scenarios import BatchRun


def engine_facts(llm, max_model_len: int, startup_s: float) -> dict:
    """The KV-cache facts the engine itself settled on."""
    cache = llm.llm_engine.vllm_config.cache_config
    blocks, block_size = int(cache.num_gpu_blocks), int(cache.block_size)
    blocks_per_full_request = math.ceil(max_model_len / block_size)
    return {
        "startup_s": startup_s,
        "block_size": block_size,
        "num_blocks": blocks,
        "kv_capacity_tokens": blocks * block_size,
        # As vLLM logs it: blocks / ceil(max_model_len / block_size).
        "max_concurrency_at_max_model_len": blocks / blocks_per_full_request,
        "max_model_len": max_model_len,
        "prefix_caching": bool(cache.enable_prefix_caching),
    }


def request_result(request: dict, output) -> RequestResult:
    """TTFT is measured by the engine's front end from arrival; the decode span comes from the
    engine core's monotonic first/last token timestamps: E2EL = TTFT + (last - first)."""
    metrics = output.metrics
    tokens = len(output.outputs[0].token_ids)
    ttft = float(metrics.first_token_latency)
    e2el = ttft + float(metrics.last_token_ts - metrics.first_token_ts)
    return RequestResult(request["id"], len(output.prompt_token_ids), tokens, ttft, e2el)


class VLLMRunner:
    name = "vllm"

    def __init__(self, engine_args: dict):
        from vllm import LLM

        started = time.perf_counter()
        self.llm = LLM(**engine_args)
        self.startup_s = time.perf_counter() - started

    def run_batch(self, batch: list[dict]) -> BatchRun:
        from vllm import SamplingParams

        params = [
            SamplingParams(temperature=0.0, max_tokens=r["max_tokens"], min_tokens=r["max_tokens"], ignore_eos=True)
            for r in batch
        ]
        outputs = self.llm.generate([r["prompt"] for r in batch], params, use_tqdm=False)
        return BatchRun(
            [request_result(r, o) for r, o in zip(batch, outputs)], [list(o.outputs[0].token_ids) for o in outputs]
        )
