"""vLLM offline inference (`vllm.LLM`) on the shared scenarios, greedy with a fixed output
length (ignore_eos), per-request TTFT and E2EL from the engine core's token timestamps, on
the same clock and between the same events as the HF baseline (see `TIMING`)."""

from __future__ import annotations

import math

from infbench.core.metrics import RequestResult
from infbench.offline.scenarios import BatchRun
from infbench.offline.timing import CLOCK, TIMING, child_thread_cpus, clock_name
from infbench.workload.requests import prompt_token_ids


class ClockMismatch(RuntimeError):
    pass


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


def request_result(request: dict, output, started: float, returned: float) -> RequestResult:
    """TTFT = first_token_ts - started, E2EL = last_token_ts - started, where the engine
    core's timestamps are time.monotonic() readings in its own process."""
    metrics = output.metrics
    first, last = float(metrics.first_token_ts), float(metrics.last_token_ts)
    if not started <= first <= last <= returned:
        raise ClockMismatch(
            f"vLLM's token timestamps ({first:.3f}, {last:.3f}) fall outside the generate() call "
            f"({started:.3f}-{returned:.3f}) on {clock_name()}: this vLLM no longer stamps tokens with "
            "time.monotonic; update infbench.offline.vllm_offline to its clock"
        )
    tokens = len(output.outputs[0].token_ids)
    return RequestResult(request["id"], len(output.prompt_token_ids), tokens, first - started, last - started)


class VLLMRunner:
    name = "vllm"
    timing = {**TIMING, "token_times_from": "the engine core's output timestamps (metrics.first/last_token_ts)"}

    def __init__(self, engine_args: dict):
        from vllm import LLM

        started = CLOCK()
        self.llm = LLM(**engine_args)
        self.startup_s = CLOCK() - started

    def engine_report(self) -> dict:
        """The device vLLM's platform detection chose and the dtype its model config resolved."""
        from vllm.platforms import current_platform

        return {
            "device": current_platform.device_type,
            "dtype": str(self.llm.llm_engine.vllm_config.model_config.dtype).removeprefix("torch."),
            "cpus": child_thread_cpus(),
        }

    def prompts(self, batch: list[dict]) -> list[dict]:
        """The requests' token ids, tokenized as the HF baseline tokenizes them (inside the timed
        call, as HF's are): a chat-templated prompt must not gain a second BOS."""
        tokenizer = self.llm.get_tokenizer()
        return [{"prompt_token_ids": prompt_token_ids(tokenizer, r)} for r in batch]

    def run_batch(self, batch: list[dict]) -> BatchRun:
        from vllm import SamplingParams

        params = [
            SamplingParams(temperature=0.0, max_tokens=r["max_tokens"], min_tokens=r["max_tokens"], ignore_eos=True)
            for r in batch
        ]
        started = CLOCK()
        outputs = self.llm.generate(self.prompts(batch), params, use_tqdm=False)
        returned = CLOCK()
        return BatchRun(
            [request_result(r, o, started, returned) for r, o in zip(batch, outputs)],
            [list(o.outputs[0].token_ids) for o in outputs],
        )

    def natural_output_tokens(self, workload: list[dict]) -> dict[str, int]:
        """Untimed: how many tokens each request gets when it may stop at EOS, capped at its
        max_tokens. The allocator's trace needs these; the timed runs suppress EOS."""
        from vllm import SamplingParams

        params = [SamplingParams(temperature=0.0, max_tokens=r["max_tokens"]) for r in workload]
        outputs = self.llm.generate(self.prompts(workload), params, use_tqdm=False)
        return {r["id"]: len(o.outputs[0].token_ids) for r, o in zip(workload, outputs)}
