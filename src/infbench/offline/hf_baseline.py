"""Hugging Face Transformers baseline: `generate` on the shared scenarios, greedy, fixed
output length (min_new_tokens == max_new_tokens), on the configured device, timed on the
same clock and between the same events as vLLM (see `TIMING`)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.streamers import BaseStreamer

from infbench.core.metrics import RequestResult, itl_from_token_times
from infbench.offline.scenarios import BatchRun
from infbench.offline.timing import CLOCK, TIMING, thread_cpus
from infbench.workload.requests import adds_special_tokens

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def stop_token_ids(model, tokenizer) -> set[int]:
    """The ids that end a generation: the tokenizer's EOS and the generation config's."""
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def count_generated(token_ids: list[int], excluded: set[int]) -> int:
    """Tokens generated before the first stop or padding token: what was really produced."""
    return next((i for i, token in enumerate(token_ids) if token in excluded), len(token_ids))


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
        self.token_times.append(CLOCK())

    def end(self):
        pass


class HFRunner:
    name = "hf"
    timing = {**TIMING, "token_times_from": "a generate() streamer, called with each step's tokens once on the host"}

    def __init__(self, model_dir: str, dtype: str, threads: int, device: str):
        torch.set_num_threads(threads)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=TORCH_DTYPES[dtype]).to(device).eval()
        self.not_generated = stop_token_ids(self.model, self.tokenizer) | {self.tokenizer.pad_token_id}

    def engine_report(self) -> dict:
        """Where the model really is, read from its weights, not from the config."""
        weights = next(self.model.parameters())
        return {
            "device": weights.device.type,
            "dtype": str(weights.dtype).removeprefix("torch."),
            "cpus": thread_cpus(),
            "torch_threads": torch.get_num_threads(),
        }

    def run_batch(self, batch: list[dict]) -> BatchRun:
        """One generate() call for a group. A static batch runs until its longest request is
        done; each request counts the tokens it really got, up to the number it asked for.
        The padded cache holds batch x (longest prompt + new tokens) token slots at its end."""
        new_tokens = max(r["max_tokens"] for r in batch)
        timer = TokenTimer()
        started = CLOCK()
        # One workload has one API, so the batch shares adds_special_tokens.
        encoded = self.tokenizer(
            [r["prompt"] for r in batch],
            add_special_tokens=adds_special_tokens(batch[0]),
            return_tensors="pt",
            padding=True,
        ).to(self.model.device)
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
        prompt_len = encoded["input_ids"].shape[1]
        token_ids = []
        for row, request in enumerate(batch):
            asked = output[row, prompt_len : prompt_len + request["max_tokens"]].tolist()
            token_ids.append(asked[: count_generated(asked, self.not_generated)])
        self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)  # vLLM returns text too
        returned = CLOCK()
        results = []
        for row, (request, ids) in enumerate(zip(batch, token_ids)):
            ttft, itl = itl_from_token_times(started, timer.token_times[: len(ids)])
            e2el = timer.token_times[len(ids) - 1] - started if ids else returned - started
            prompt_tokens = int(encoded["attention_mask"][row].sum())
            results.append(RequestResult(request["id"], prompt_tokens, len(ids), ttft, e2el, itl))
        return BatchRun(results, token_ids, kv_tokens_held=len(batch) * (prompt_len + new_tokens))
