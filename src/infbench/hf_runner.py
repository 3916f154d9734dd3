"""Hugging Face Transformers baseline: `generate` on the shared scenarios, greedy, fixed
output length (min_new_tokens == max_new_tokens), timed with perf_counter, per-token times
from a streamer."""

from __future__ import annotations

import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.streamers import BaseStreamer

from infbench.metrics import RequestResult, itl_from_token_times
from infbench.offline_scenarios import BatchRun

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class TokenTimer(BaseStreamer):
    """Records when each generation step's tokens exist. generate() first puts the prompt,
    then one tensor of new tokens (one per sequence) per decoding step."""

    def __init__(self):
        self.prompt_seen = False
        self.token_times: list[float] = []

    def put(self, value):
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.token_times.append(time.perf_counter())

    def end(self):
        pass


class HFRunner:
    name = "hf"

    def __init__(self, model_dir: str, dtype: str, threads: int):
        torch.set_num_threads(threads)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=TORCH_DTYPES[dtype]).eval()

    def run_batch(self, batch: list[dict]) -> BatchRun:
        """One generate() call for a group. A static batch runs until its longest request is
        done; each request counts only the tokens it asked for. The padded cache holds
        batch x (longest prompt + new tokens) token slots at its end."""
        encoded = self.tokenizer([r["prompt"] for r in batch], return_tensors="pt", padding=True)
        new_tokens = max(r["max_tokens"] for r in batch)
        timer = TokenTimer()
        started = time.perf_counter()
        with torch.inference_mode():
            output = self.model.generate(
                **encoded,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=self.tokenizer.pad_token_id,
                streamer=timer,
                temperature=None,
                top_p=None,
                top_k=None,
            )
        finished = time.perf_counter()
        prompt_len = encoded["input_ids"].shape[1]
        results, token_ids = [], []
        for row, request in enumerate(batch):
            own = request["max_tokens"]
            ttft, itl = itl_from_token_times(started, timer.token_times[:own])
            # The caller gets every answer when the batch returns: that is each request's E2E.
            results.append(
                RequestResult(
                    request["id"], int(encoded["attention_mask"][row].sum()), own, ttft, finished - started, itl
                )
            )
            token_ids.append(output[row, prompt_len : prompt_len + own].tolist())
        return BatchRun(results, token_ids, kv_tokens_held=len(batch) * (prompt_len + new_tokens))
