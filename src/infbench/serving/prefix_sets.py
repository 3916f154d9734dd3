"""Request sets whose prompts share prefixes, built from the workload's user turns, and the
prefix-cache hits vLLM can have on them, predicted block by block.

- shared_prefix: `groups` system prompts of about `tokens` tokens; each request is one group's
  system prompt followed by a workload user turn, the groups taking turns (g0, g1, g0, ...).
- conversations: `count` conversations of `turns` user turns each; every turn's request carries
  the earlier turns and their replies (reply text of the earlier turn's output length, cut from
  the passage), sent turn by turn (every conversation's turn 1, then every turn 2, ...).

With `api: chat` the messages go through the model's chat template; with `completions` they are
joined by blank lines. Either way the prediction reads the real token ids.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from infbench.kv.simulator import Strategy, TraceRequest, shared_blocks
from infbench.workload.requests import PASSAGE, Prompts, passage_text

SETS = ("shared_prefix", "conversations")


@dataclass
class PrefixSet:
    name: str
    description: str
    requests: list[dict]  # workload rows: id, kind, prompt, prompt_tokens, max_tokens, api, messages


def row(prompts: Prompts, id: str, kind: str, messages: list[dict], max_tokens: int) -> dict:
    prompt, tokens = prompts.render_messages(messages)
    return {
        "id": id,
        "kind": kind,
        "prompt": prompt,
        "prompt_tokens": tokens,
        "max_tokens": max_tokens,
        "api": prompts.api,
        "messages": messages,
    }


def user_turns(workload: list[dict]) -> list[tuple[str, int]]:
    """(user text, output length) of every workload request, in order."""
    return [(r["messages"][-1]["content"], r["max_tokens"]) for r in workload]


def passage_cut(prompts: Prompts, rng: random.Random, tokens: int) -> str:
    ids = prompts.tokenizer(PASSAGE, add_special_tokens=False)["input_ids"]
    return passage_text(prompts.tokenizer, ids, rng.randrange(len(ids)), tokens)


def shared_prefix_set(
    prompts: Prompts, workload: list[dict], settings: dict, max_model_len: int, seed: int
) -> PrefixSet:
    rng = random.Random(seed)
    systems = [passage_cut(prompts, rng, settings["tokens"]) for _ in range(settings["groups"])]
    turns = user_turns(workload)
    requests = []
    for index in range(settings["requests"]):
        group = index % len(systems)
        text, max_tokens = turns[index % len(turns)]
        messages = [{"role": "system", "content": systems[group]}, {"role": "user", "content": text}]
        request = row(prompts, f"shared-g{group}-{index:03d}", "shared_prefix", messages, max_tokens)
        request["max_tokens"] = max(1, min(max_tokens, max_model_len - request["prompt_tokens"] - 4))
        requests.append(request)
    return PrefixSet(
        "shared_prefix",
        f"{settings['requests']} requests in {settings['groups']} groups, each group behind its own system "
        f"prompt of about {settings['tokens']} tokens",
        requests,
    )


def conversation_set(
    prompts: Prompts, workload: list[dict], settings: dict, max_model_len: int, seed: int
) -> PrefixSet:
    """Turns that no longer fit max_model_len end their conversation early."""
    rng = random.Random(seed + 1)
    turns = user_turns(workload)
    histories = [[] for _ in range(settings["count"])]
    requests, position = [], 0
    for turn in range(settings["turns"]):
        for conversation, history in enumerate(histories):
            if history is None:
                continue
            text, max_tokens = turns[position % len(turns)]
            position += 1
            messages = [*history, {"role": "user", "content": text}]
            request = row(prompts, f"conv-{conversation}-turn-{turn + 1}", "conversation", messages, max_tokens)
            if request["prompt_tokens"] + max_tokens > max_model_len:
                histories[conversation] = None
                continue
            requests.append(request)
            reply = passage_cut(prompts, rng, max_tokens)
            histories[conversation] = [*messages, {"role": "assistant", "content": reply}]
    return PrefixSet(
        "conversations",
        f"{settings['count']} conversations of up to {settings['turns']} turns, each turn carrying the earlier "
        "turns and replies",
        requests,
    )


def common_prefix(a: list[int], b: list[int]) -> int:
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


def predicted_hits(prompt_ids: list[list[int]], block_size: int) -> dict:
    """Prefix-cache hits when the requests are admitted one after another into an empty cache:
    a request reuses the full blocks (kv.simulator.shared_blocks: only whole blocks are hashed
    and shared) of its longest common prefix with any earlier request, short of its own last
    token, which vLLM always computes. Requests admitted in the same step as the one they
    share with find nothing cached yet, so a live server hits at most this many."""
    strategy = Strategy(f"paged_{block_size}", "paged", block_size=block_size, share_prefix=True)
    hits = []
    for index, ids in enumerate(prompt_ids):
        shared = max((common_prefix(ids, earlier) for earlier in prompt_ids[:index]), default=0)
        request = TraceRequest(len(ids), 0, prefix_group=0, prefix_len=min(shared, len(ids) - 1))
        hits.append(shared_blocks(strategy, request) * block_size)
    queried = sum(len(ids) for ids in prompt_ids)
    return {
        "hit_tokens": sum(hits),
        "query_tokens": queried,
        "hit_rate": sum(hits) / queried if queried else 0.0,
        "shared_blocks": sum(hits) // block_size,
        "block_size": block_size,
    }
