"""Conversations for users in multi-turn chat sessions, and the time a user thinks between a
reply and their next turn: synthetic conversations (the workload's user turns behind one shared
system prompt) or every turn of a ShareGPT file's conversations. See docs/method.md#sessions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path

from infbench.workload.requests import PASSAGE, count_tokens, passage_text
from infbench.workload.sources import WorkloadError, _records_json, read_jsonl_records

# Tokens the chat template may add around one message (SmolLM2's adds 5, Llama 3's 4-5): a
# turn is sent only where the conversation so far, its new turn with this much on each of the
# two new messages, and its output fit max_model_len.
MESSAGE_SLACK = 8
USER_ROLES, REPLY_ROLES = ("human", "user"), ("gpt", "assistant", "chatgpt", "bard", "model")


@dataclass(frozen=True)
class Turn:
    user: str
    user_tokens: int
    max_tokens: int  # its output length: the recorded reply's tokens (ShareGPT) or the workload row's
    reply: str | None = None  # the recorded reply, carried into later turns where sessions.reply is recorded
    reply_tokens: int | None = None


@dataclass(frozen=True)
class Conversation:
    id: str
    system: str | None
    # Tokens a turn's prompt holds besides the conversation's turns, replies and MESSAGE_SLACK
    # a message: the system prompt and the template's own, so that the first turn's prompt
    # (base + its tokens + 2 x MESSAGE_SLACK) is its exact count through the chat template.
    base_tokens: int
    turns: tuple[Turn, ...]


def base_tokens(tokenizer, system: str | None, turn: Turn, count_prompt) -> int:
    """A conversation's base_tokens: its first turn's prompt through `count_prompt` (messages ->
    tokens, the chat template's count) less the turn's tokens and slack; without a counter, the
    system prompt's tokens as they are."""
    if count_prompt is None:
        return count_tokens(tokenizer, system) if system else 0
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": turn.user}]
    return count_prompt(messages) - turn.user_tokens - 2 * MESSAGE_SLACK


@dataclass(frozen=True)
class ThinkTime:
    """Seconds a user reads and types between a reply's end and their next turn: `fixed` at the
    mean, or `exponential` with that mean, drawn from each user's own seeded generator."""

    mean_s: float
    distribution: str = "exponential"

    def draw(self, rng: random.Random) -> float:
        if self.distribution == "fixed" or self.mean_s == 0:
            return self.mean_s
        return rng.expovariate(1 / self.mean_s)

    def first(self, rng: random.Random) -> float:
        """A user's wait before their first turn, so that users arrive spread as in a steady
        state: the residual of a think time (exponential: the same law; fixed: uniform)."""
        return self.draw(rng) if self.distribution == "exponential" else rng.uniform(0, self.mean_s)


def turn_footprints(conversation: Conversation, reply: str, max_model_len: int) -> list[tuple[int, int]]:
    """(prompt tokens, output tokens) of each turn a user sends of this conversation, the prompt
    carrying the earlier turns and replies (the model's reply is its max_tokens: the client sends
    ignore_eos), as the client estimates them; the turns that fit max_model_len."""
    context, footprints = conversation.base_tokens, []
    for turn in conversation.turns:
        if not fits(context, turn, max_model_len):
            break
        prompt = context + turn.user_tokens + 2 * MESSAGE_SLACK
        footprints.append((prompt, turn.max_tokens))
        context = prompt + (turn.reply_tokens if reply == "recorded" else turn.max_tokens)
    return footprints


def fits(conversation_tokens: int, turn: Turn, max_model_len: int) -> bool:
    """Whether `turn` can follow a conversation of this many tokens (the earlier turns and
    replies, template included) within max_model_len."""
    return conversation_tokens + turn.user_tokens + 2 * MESSAGE_SLACK + turn.max_tokens <= max_model_len


def synthetic_conversations(tokenizer, pool: list[dict], settings: dict, max_model_len: int, seed: int,
                            count_prompt=None):  # fmt: skip
    """Conversations of `turns` user turns (or a count drawn uniformly from its min to its max
    inclusive, docs/method.md#sessions), each a pool row's user text and output length in
    the pool's order, behind one system prompt of about `system_prompt_tokens` tokens that every
    conversation shares, until the pool runs out. Each turn's recorded reply is text of its
    output length cut from the passage."""
    rng = random.Random(seed)
    ids = tokenizer(PASSAGE, add_special_tokens=False)["input_ids"]
    system = None
    if settings["system_prompt_tokens"]:
        system = passage_text(tokenizer, ids, rng.randrange(len(ids)), settings["system_prompt_tokens"])
    low, high = turn_range(settings["turns"])
    turns = []
    for row in pool:
        text, length = row["messages"][-1]["content"], row["max_tokens"]
        reply = passage_text(tokenizer, ids, rng.randrange(len(ids)), length)
        turns.append(Turn(text, count_tokens(tokenizer, text), length, reply, count_tokens(tokenizer, reply)))
    conversations, start, index = [], 0, 0
    while start + (per := low if low == high else rng.randint(low, high)) <= len(turns):
        held = tuple(turns[start : start + per])
        base = base_tokens(tokenizer, system, held[0], count_prompt)
        if fits(base, held[0], max_model_len):
            conversations.append(Conversation(f"synthetic-{index:05d}", system, base, held))
        start, index = start + per, index + 1
    return conversations


def turn_range(turns: int | dict) -> tuple[int, int]:
    """sessions.turns as (fewest, most) turns a synthetic conversation holds."""
    return (turns, turns) if isinstance(turns, int) else (turns["min"], turns["max"])


def sharegpt_records(path: Path) -> list:
    if not path.is_file():
        raise WorkloadError(f"sessions.source: no file at {path}; give a ShareGPT .json or .jsonl file, or synthetic")
    return read_jsonl_records(path) if path.suffix.lower() == ".jsonl" else _records_json(path)


def sharegpt_conversations(
    tokenizer, path: Path, max_model_len: int, count_prompt=None
) -> tuple[list[Conversation], dict]:
    """Every turn of each ShareGPT conversation: a leading system message is its system prompt,
    then each user message with the reply after it is a turn whose output length is that
    reply's token count. A conversation ends at its first message out of that order, and where
    its turns outgrow max_model_len; one with no whole turn is skipped. A row that is not a
    conversation stops with its row and field named. Returns the conversations and the counts."""
    records = sharegpt_records(path)
    conversations = []
    counts = {"rows": len(records), "without_a_turn": 0, "cut_short": 0, "turns": 0, "with_a_system_prompt": 0}
    for number, record in enumerate(records, start=1):
        messages = record.get("conversations") if isinstance(record, dict) else None
        if not isinstance(messages, list):
            raise WorkloadError(f"{path}: row {number} has no 'conversations' list; is this a ShareGPT file?")
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("value"), str):
                raise WorkloadError(f"{path}: row {number}, conversations[{index}] has no text 'value'")
        system = None
        if messages and messages[0].get("from") == "system":
            system, messages = messages[0]["value"], messages[1:]
        turns, cut = [], False
        for user, reply in zip(messages[::2], messages[1::2]):
            if user.get("from") not in USER_ROLES or reply.get("from") not in REPLY_ROLES or not user["value"].strip():
                cut = True
                break
            reply_tokens = max(1, count_tokens(tokenizer, reply["value"]))
            turns.append(
                Turn(user["value"], count_tokens(tokenizer, user["value"]), reply_tokens, reply["value"], reply_tokens)
            )
        conversation = Conversation(
            f"sharegpt-row{number}", system, base_tokens(tokenizer, system, turns[0], count_prompt) if turns else 0,
            tuple(turns),
        )  # fmt: skip
        # The turns that fit max_model_len, each carrying the earlier ones and their replies.
        fitting = len(turn_footprints(conversation, "recorded", max_model_len)) if turns else 0
        if not fitting:
            counts["without_a_turn"] += 1
            continue
        counts["cut_short"] += cut or fitting < len(turns)
        counts["turns"] += fitting
        counts["with_a_system_prompt"] += system is not None
        conversations.append(replace(conversation, turns=conversation.turns[:fitting]))
    counts["conversations"] = len(conversations)
    if not conversations:
        raise WorkloadError(
            f"{path}: none of its {len(records)} conversations has a user turn and its reply that fit "
            f"engine.max_model_len = {max_model_len}; give conversations of human and gpt turns"
        )
    return conversations, counts


def build_conversations(tokenizer, pool: list[dict], settings: dict, max_model_len: int, seed: int, count_prompt):
    """The sessions' conversations and where they came from (`source` in the artifact);
    `count_prompt`: a message list's tokens through the chat template."""
    if settings["source"] == "synthetic":
        conversations = synthetic_conversations(tokenizer, pool, settings, max_model_len, seed, count_prompt)
        if not conversations:
            raise WorkloadError(
                f"sessions: no synthetic conversation's first turn fits engine.max_model_len = {max_model_len}; "
                "lower sessions.system_prompt_tokens"
            )
        source = {
            "kind": "synthetic",
            "conversations": len(conversations),
            "turns": settings["turns"],
            "system_prompt_tokens": settings["system_prompt_tokens"],
        }
    else:
        path = Path(settings["source"])
        conversations, counts = sharegpt_conversations(tokenizer, path, max_model_len, count_prompt)
        source = {"kind": "sharegpt", "path": settings["source"], **counts}
    return conversations, source
