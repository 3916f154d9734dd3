"""The shared workload: one seeded prompt set that every stage runs.

It holds the study's own prompts plus either synthetic requests whose prompt and output
lengths follow a log-normal distribution (ShareGPT-like or Alpaca-like presets,
PagedAttention paper section 6), their text cut from a fixed English passage to the sampled
token count, or a seeded sample of the user's own dataset (workload.sources). Counts come
from the model's own tokenizer. With `api: chat` each prompt is the model's chat template
applied to the request's messages, the text every engine then runs.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from infbench.workload.sources import WorkloadError, checksum, read_rows
from infbench.workload.traces import MOONCAKE_BLOCK_TOKENS, read_trace

# The study's prompts (REFERENCE section 1).
STUDY_SINGLE_PROMPT = "Explain what a large language model is in simple terms."
STUDY_API_PROMPT = "What is inference in machine learning?"

# Warm-up requests are cut to this many output tokens: enough to run a batch shape through
# prefill and decode, short enough to cost a second or two. The serving passes' always are; the
# offline scenarios' only where the engine already ran a group as large (scenarios.covered).
WARMUP_MAX_TOKENS = 16

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


# vLLM's ShareGPT sampling drops prompts and replies shorter than this many tokens.
SHAREGPT_MIN_TOKENS = 4


@dataclass
class Request:
    id: str
    kind: str  # "study_single", "study_api", "synthetic", "dataset" or "trace"
    prompt: str  # what the offline engines and /v1/completions get (api chat: the templated text)
    prompt_tokens: int
    max_tokens: int
    api: str = "completions"  # "chat": `prompt` is `messages` through the chat template
    messages: list[dict] = field(default_factory=list)  # the user turn, as /v1/chat/completions sends it
    arrival_s: float | None = None  # a trace's request: when it arrived, from the trace's first

    def to_json(self) -> dict:
        return asdict(self)


def adds_special_tokens(request: dict) -> bool:
    """Whether tokenizing the request's prompt adds the tokenizer's special tokens: yes for a
    plain prompt, no for a chat-templated one, which holds them already (as vLLM's chat
    endpoint tokenizes it)."""
    return request.get("api", "completions") == "completions"


def prompt_token_ids(tokenizer, request: dict) -> list[int]:
    """The token ids every engine runs for a request (see adds_special_tokens)."""
    return tokenizer(request["prompt"], add_special_tokens=adds_special_tokens(request))["input_ids"]


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


class Prompts:
    """Turns a user turn into the request the engines run, for one API."""

    def __init__(self, tokenizer, api: str, asked_by: str = "workload.api = 'chat'",
                 fix: str = "set workload.api: completions"):  # fmt: skip
        """`asked_by` and `fix` name the setting that asks for the chat API, and its way out."""
        if api == "chat" and not has_chat_template(tokenizer):
            raise WorkloadError(
                f"{asked_by}, but this model's tokenizer has no chat template; {fix} or use a chat model"
            )
        self.tokenizer, self.api = tokenizer, api

    def overhead(self) -> int:
        """Tokens the template adds around an empty user turn (0 for completions)."""
        return self.render("")[1] if self.api == "chat" else 0

    def render(self, text: str) -> tuple[str, int]:
        """(prompt text, its token count) for a user turn."""
        return self.render_messages([{"role": "user", "content": text}])

    def render_messages(self, messages: list[dict]) -> tuple[str, int]:
        """(prompt text, its token count) for a message list: the chat template around it, or
        (completions) the contents joined by blank lines, a lone user turn as it is."""
        if self.api == "completions":
            text = "\n\n".join(message["content"] for message in messages)
            return text, count_tokens(self.tokenizer, text)
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return prompt, len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    def request(self, id: str, kind: str, text: str, max_tokens: int) -> Request:
        prompt, tokens = self.render(text)
        return Request(id, kind, prompt, tokens, max_tokens, self.api, [{"role": "user", "content": text}])


def lognormal_lengths(rng: random.Random, count: int, mean: float, sigma: float, low: int, high: int) -> list[int]:
    """Log-normal lengths with the given arithmetic mean: mu = ln(mean) - sigma^2 / 2."""
    mu = math.log(mean) - sigma**2 / 2
    return [min(high, max(low, round(rng.lognormvariate(mu, sigma)))) for _ in range(count)]


def length_distributions(synthetic: dict) -> tuple[dict, dict]:
    if synthetic["preset"] == "custom":
        return synthetic["prompt_tokens"], synthetic["output_tokens"]
    preset = PRESETS[synthetic["preset"]]
    return preset["prompt_tokens"], preset["output_tokens"]


def passage_text(tokenizer, token_ids: list[int], start: int, length: int) -> str:
    """Text of about `length` tokens cut from the passage at `start` (its true count differs
    a little: decoded text re-tokenizes differently at the cut)."""
    window = [token_ids[(start + i) % len(token_ids)] for i in range(length)]
    return tokenizer.decode(window, skip_special_tokens=True).strip()


def count_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=True)["input_ids"])


def study_requests(prompts: Prompts, study_max_tokens: int) -> list[Request]:
    return [
        prompts.request("study-single", "study_single", STUDY_SINGLE_PROMPT, study_max_tokens),
        prompts.request("study-api", "study_api", STUDY_API_PROMPT, 50),
    ]


def synthetic_requests(prompts: Prompts, synthetic: dict, max_model_len: int, rng: random.Random) -> list[Request]:
    count = synthetic["num_requests"]
    if not count:
        return []
    tokenizer = prompts.tokenizer
    prompt_dist, output_dist = length_distributions(synthetic)
    prompt_lens = lognormal_lengths(
        rng, count, prompt_dist["mean"], prompt_dist["sigma"], prompt_dist["min"], prompt_dist["max"]
    )
    output_lens = lognormal_lengths(
        rng, count, output_dist["mean"], output_dist["sigma"], output_dist["min"], output_dist["max"]
    )
    passage_ids = tokenizer(PASSAGE, add_special_tokens=False)["input_ids"]
    overhead = prompts.overhead()
    requests = []
    for index, (prompt_len, output_len) in enumerate(zip(prompt_lens, output_lens)):
        # Requests must fit the engine: prompt (with its template) + output <= max_model_len.
        prompt_len = max(1, min(prompt_len, max_model_len - 8 - overhead))
        text = passage_text(tokenizer, passage_ids, rng.randrange(len(passage_ids)), prompt_len)
        request = prompts.request(f"synthetic-{index:05d}", "synthetic", text, output_len)
        request.max_tokens = max(1, min(output_len, max_model_len - request.prompt_tokens - 4))
        requests.append(request)
    return requests


def file_source(kind: str, given: str, path: Path, fmt: str, rows_in_source: int, usable: int) -> dict:
    """Where a file's requests came from: the path as configured, its format and SHA-256, its
    rows and those it could not use."""
    return {
        "kind": kind,
        "path": str(given),
        "format": fmt,
        "sha256": checksum(path),
        "rows_in_source": rows_in_source,
        "rows_unusable": rows_in_source - usable,
    }


def dataset_requests(
    prompts: Prompts, dataset: dict, path: Path, max_model_len: int, rng: random.Random
) -> tuple[list[Request], dict]:
    """A seeded sample of `num_requests` rows of the user's dataset that fit max_model_len, and
    what was read and dropped. Rows are visited in a seeded random order (as vLLM's benchmark
    samples datasets) until enough fit; output lengths come from the file's field, ShareGPT's
    reply, or `output_tokens`."""
    fmt, rows_in_source, rows = read_rows(path, dataset)
    order = list(range(len(rows)))
    rng.shuffle(order)
    requests, dropped, examined = [], {"too_long": 0, "too_short": 0}, 0
    for position in order:
        if len(requests) == dataset["num_requests"]:
            break
        examined += 1
        row = rows[position]
        prompt, prompt_tokens = prompts.render(row.prompt)
        if row.reply is not None:
            output_tokens = len(prompts.tokenizer(row.reply, add_special_tokens=False)["input_ids"])
            if min(prompt_tokens - prompts.overhead(), output_tokens) < SHAREGPT_MIN_TOKENS:
                dropped["too_short"] += 1
                continue
        else:
            output_tokens = row.output_tokens or dataset["output_tokens"]
        if prompt_tokens + output_tokens > max_model_len:
            dropped["too_long"] += 1
            continue
        request = prompts.request(f"dataset-{row.row:06d}", "dataset", row.prompt, output_tokens)
        requests.append(request)
    source = {
        **file_source("dataset", dataset["path"], path, fmt, rows_in_source, len(rows)),
        "rows_examined": examined,
        "dropped": dropped,
        "kept": len(requests),
        "requested": dataset["num_requests"],
    }
    if not requests:
        raise WorkloadError(
            f"{path}: no row fits engine.max_model_len = {max_model_len} ({examined} rows tried: "
            f"{dropped['too_long']} too long, {dropped['too_short']} under {SHAREGPT_MIN_TOKENS} tokens); "
            "raise engine.max_model_len or lower the output lengths"
        )
    return requests, source


# Words for a trace's prompts: the passage's vocabulary.
TRACE_WORDS = sorted(set(PASSAGE.split()))


def seeded_text(tokenizer, seed: str, length: int) -> str:
    """Text of about `length` tokens: words of TRACE_WORDS drawn with `seed`, tokenized and cut
    to `length` tokens. Distinct seeds give distinct texts from their first words (two share
    their first 16 words with chance 1 in 153^16), so no two blocks share a prefix by accident,
    as rotations of one short passage would (it has only a few hundred starts)."""
    words = random.Random(seed).choices(TRACE_WORDS, k=length)
    ids = tokenizer(" ".join(words), add_special_tokens=False)["input_ids"][:length]
    return tokenizer.decode(ids, skip_special_tokens=True).strip()


def trace_text(tokenizer, row, rng: random.Random) -> str:
    """A trace row's prompt: its own text, or seeded words of its length. Mooncake's hash_ids
    give one 512-token block each, seeded by the id (not the row), so rows with the same ids
    share the same prompt prefix, as the trace's requests did, and rows with other ids share
    none."""
    if row.prompt is not None:
        return row.prompt
    if not row.blocks:
        return seeded_text(tokenizer, f"row-{rng.random()}", row.input_tokens)
    pieces = []
    for index, block in enumerate(row.blocks):
        length = min(MOONCAKE_BLOCK_TOKENS, row.input_tokens - index * MOONCAKE_BLOCK_TOKENS)
        if length < 1:
            break
        pieces.append(seeded_text(tokenizer, f"block-{block}", length))
    return " ".join(pieces)


def trace_requests(
    prompts: Prompts, trace: dict, path: Path, max_model_len: int, rng: random.Random
) -> tuple[list[Request], dict]:
    """The trace's first `num_requests` usable rows that fit max_model_len, in the trace's
    order and with its arrival times counted from the first kept one (a row that does not fit
    leaves a gap, the others keep their times), and what was read and dropped: the span and
    rate of what was kept."""
    fmt, rows_in_source, rows = read_trace(path, trace["format"])
    requests, too_long = [], 0
    for row in rows:
        if len(requests) == trace["num_requests"]:
            break
        if (row.input_tokens or 0) + row.output_tokens > max_model_len:
            too_long += 1
            continue
        request = prompts.request(
            f"trace-{row.row:06d}", "trace", trace_text(prompts.tokenizer, row, rng), row.output_tokens
        )
        if request.prompt_tokens + request.max_tokens > max_model_len:
            too_long += 1
            continue
        request.arrival_s = row.arrival_s
        requests.append(request)
    if not requests:
        raise WorkloadError(
            f"{path}: no row fits engine.max_model_len = {max_model_len} ({too_long} too long); raise "
            "engine.max_model_len or give a trace of shorter requests"
        )
    # The replay's clock starts at the first kept request, whatever was dropped before it.
    first = requests[0].arrival_s
    for request in requests:
        request.arrival_s -= first
    span = requests[-1].arrival_s
    source = {
        **file_source("trace", trace["path"], path, fmt, rows_in_source, len(rows)),
        "dropped": {"too_long": too_long},
        "kept": len(requests),
        "requested": trace["num_requests"],
        "span_s": span,
        # (n - 1) / span: the rate of arrivals between the first kept request and the last
        "rate": (len(requests) - 1) / span if span > 0 else None,
    }
    return requests, source


def build_workload(
    tokenizer,
    workload: dict,
    max_model_len: int,
    study_max_tokens: int,
    seed: int,
    source_path: Path | None = None,
) -> tuple[list[Request], dict]:
    """The requests, and a description of where they came from (for workload_summary.json).
    `source_path`: where workload.dataset.path or workload.trace.path resolved."""
    rng = random.Random(seed)
    prompts = Prompts(tokenizer, workload.get("api", "completions"))
    requests = study_requests(prompts, study_max_tokens) if workload["study_prompts"] else []
    kind = workload.get("source", "synthetic")
    if kind == "dataset":
        sampled, source = dataset_requests(prompts, workload["dataset"], Path(source_path), max_model_len, rng)
    elif kind == "trace":
        sampled, source = trace_requests(prompts, workload["trace"], Path(source_path), max_model_len, rng)
    else:
        sampled = synthetic_requests(prompts, workload["synthetic"], max_model_len, rng)
        source = {"kind": "synthetic", "preset": workload["synthetic"]["preset"], "kept": len(sampled)}
    return requests + sampled, source


def pool_requests(
    prompts: Prompts,
    workload: dict,
    requests: list[Request],
    max_model_len: int,
    seed: int,
    source_path: Path | None = None,
) -> list[Request]:
    """The distinct requests the serving passes draw from without replacement (request_pool.jsonl),
    `workload.pool_requests` of them: a trace's own requests; a dataset's rows sampled without
    replacement among those that fit (fewer where the file has fewer); synthetic requests of the
    workload's length distributions, each prompt words of the passage's vocabulary seeded by its
    index (distinct from their first words, so that no two share a prefix by accident)."""
    kind, count = workload.get("source", "synthetic"), workload["pool_requests"]
    if kind == "trace":
        return [r for r in requests if r.kind == "trace"]
    if kind == "dataset":
        dataset = {**workload["dataset"], "num_requests": count}
        return dataset_requests(prompts, dataset, Path(source_path), max_model_len, random.Random(seed + 1))[0]
    rng = random.Random(seed + 1)
    prompt_dist, output_dist = length_distributions(workload["synthetic"])
    prompt_lens = lognormal_lengths(rng, count, *(prompt_dist[k] for k in ("mean", "sigma", "min", "max")))
    output_lens = lognormal_lengths(rng, count, *(output_dist[k] for k in ("mean", "sigma", "min", "max")))
    overhead, pool = prompts.overhead(), []
    for index, (prompt_len, output_len) in enumerate(zip(prompt_lens, output_lens)):
        prompt_len = max(1, min(prompt_len, max_model_len - 8 - overhead))
        text = seeded_text(prompts.tokenizer, f"pool-{seed}-{index}", prompt_len)
        request = prompts.request(f"pool-{index:05d}", "synthetic", text, output_len)
        request.max_tokens = max(1, min(output_len, max_model_len - request.prompt_tokens - 4))
        pool.append(request)
    return pool


def workload_summary(tokenizer, workload: dict, requests: list[Request], source: dict) -> dict:
    """What the workload is and where it came from, for the report and run comparisons."""
    template = getattr(tokenizer, "chat_template", None)
    return {
        "api": workload.get("api", "completions"),
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest() if template else None,
        "source": source,
        "requests": len(requests),
        "prompt_tokens": sum(r.prompt_tokens for r in requests),
        "max_tokens": sum(r.max_tokens for r in requests),
    }
