"""The shared workload: one seeded prompt set that every stage runs.

It holds the study's own prompts plus synthetic requests whose prompt and output lengths
follow a log-normal distribution (ShareGPT-like or Alpaca-like presets, PagedAttention
paper section 6). Prompt text is cut from a fixed English passage to the sampled token
count with the model's own tokenizer; the recorded count is the re-tokenized one.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

# The study's prompts (REFERENCE section 1).
STUDY_SINGLE_PROMPT = "Explain what a large language model is in simple terms."
STUDY_API_PROMPT = "What is inference in machine learning?"

# Mean prompt / output lengths reported by the PagedAttention paper for its traces.
PRESETS = {
    "alpaca": {
        "prompt_tokens": {"mean": 19, "sigma": 0.5, "min": 4, "max": 128},
        "output_tokens": {"mean": 58, "sigma": 0.6, "min": 4, "max": 256},
    },
    "sharegpt": {
        "prompt_tokens": {"mean": 161, "sigma": 0.9, "min": 4, "max": 1024},
        "output_tokens": {"mean": 338, "sigma": 0.8, "min": 4, "max": 1024},
    },
}

# Source text for synthetic prompts: plain prose with varied vocabulary, so the tokenizer
# sees ordinary text (random token ids decode to strings that do not re-tokenize stably).
PASSAGE = (
    "Large language models are trained to predict the next word of a text. During training "
    "they read books, articles, code and conversations, and adjust billions of parameters so "
    "that their predictions become more accurate. At inference time the model receives a "
    "prompt, processes every token of it in one pass called prefill, and then produces the "
    "answer one token at a time in a loop called decoding. Each step of the loop attends to "
    "all earlier tokens, whose keys and values are kept in a cache so that they are not "
    "computed again. The cache grows with every generated token and with every request that "
    "is served at the same time, which is why memory, rather than arithmetic, often limits "
    "how many users a server can handle. Operating systems faced a similar problem decades "
    "ago and solved it with virtual memory: memory is split into pages of a fixed size, and a "
    "table maps each logical page to a physical one, so a process never needs one large "
    "contiguous region. Serving engines borrowed that idea for the key-value cache. Weather "
    "forecasts, recipes for bread, the rules of chess, the history of bridges, the migration "
    "of birds across continents, and the design of quiet electric trains are all topics a "
    "user might ask about, and each question arrives with its own length and its own answer. "
)


@dataclass
class Request:
    id: str
    kind: str  # "study_single", "study_api" or "synthetic"
    prompt: str
    prompt_tokens: int
    max_tokens: int

    def to_json(self) -> dict:
        return asdict(self)


def lognormal_lengths(rng: random.Random, count: int, mean: float, sigma: float, low: int, high: int) -> list[int]:
    """Log-normal lengths with the given arithmetic mean: mu = ln(mean) - sigma^2 / 2."""
    mu = math.log(mean) - sigma**2 / 2
    return [min(high, max(low, round(rng.lognormvariate(mu, sigma)))) for _ in range(count)]


def length_distributions(synthetic: dict) -> tuple[dict, dict]:
    if synthetic["preset"] == "custom":
        return synthetic["prompt_tokens"], synthetic["output_tokens"]
    preset = PRESETS[synthetic["preset"]]
    return preset["prompt_tokens"], preset["output_tokens"]


def prompt_of_length(tokenizer, token_ids: list[int], start: int, length: int) -> tuple[str, int]:
    """Text of about `length` tokens cut from the passage at `start`; returns (text, true count)."""
    window = [token_ids[(start + i) % len(token_ids)] for i in range(length)]
    text = tokenizer.decode(window, skip_special_tokens=True).strip()
    return text, count_tokens(tokenizer, text)


def count_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=True)["input_ids"])


def build_workload(tokenizer, workload: dict, max_model_len: int, study_max_tokens: int, seed: int) -> list[Request]:
    rng = random.Random(seed)
    requests: list[Request] = []
    if workload["study_prompts"]:
        requests.append(
            Request(
                "study-single",
                "study_single",
                STUDY_SINGLE_PROMPT,
                count_tokens(tokenizer, STUDY_SINGLE_PROMPT),
                study_max_tokens,
            )
        )
        requests.append(
            Request("study-api", "study_api", STUDY_API_PROMPT, count_tokens(tokenizer, STUDY_API_PROMPT), 50)
        )
    synthetic = workload["synthetic"]
    count = synthetic["num_requests"]
    if count:
        prompt_dist, output_dist = length_distributions(synthetic)
        prompt_lens = lognormal_lengths(
            rng, count, prompt_dist["mean"], prompt_dist["sigma"], prompt_dist["min"], prompt_dist["max"]
        )
        output_lens = lognormal_lengths(
            rng, count, output_dist["mean"], output_dist["sigma"], output_dist["min"], output_dist["max"]
        )
        passage_ids = tokenizer(PASSAGE, add_special_tokens=False)["input_ids"]
        for index, (prompt_len, output_len) in enumerate(zip(prompt_lens, output_lens)):
            # Requests must fit the engine: prompt + output <= max_model_len.
            prompt_len = min(prompt_len, max_model_len - 8)
            output_len = max(1, min(output_len, max_model_len - prompt_len - 4))
            text, true_len = prompt_of_length(tokenizer, passage_ids, rng.randrange(len(passage_ids)), prompt_len)
            requests.append(Request(f"synthetic-{index:05d}", "synthetic", text, true_len, output_len))
    return requests
