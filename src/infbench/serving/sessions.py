"""Users in multi-turn chat sessions as a closed loop (docs/method.md#sessions): each user holds
one conversation after another, every turn carrying the conversation so far (the model's own
replies, or the recorded ones) through /v1/chat/completions, and thinks between a reply's end
and their next turn. `users_loop` runs them inside a windowed pass (serving/window.py);
`session_figures` reads a pass back through Little's law.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

from infbench.serving.client import LoadRequest, stream_request
from infbench.workload.sessions import MESSAGE_SLACK, Conversation, ThinkTime, fits

REPLIES = ("model", "recorded")


@dataclass(frozen=True)
class SessionPlan:
    conversations: list[Conversation]
    think: ThinkTime
    reply: str  # model | recorded
    max_model_len: int
    seed: int

    def supply(self, seed: int) -> Iterator[tuple[int, Conversation]]:
        """Conversations in a seeded order, round and round, each with its draw number."""
        order = list(self.conversations)
        random.Random(seed).shuffle(order)
        return enumerate(itertools.cycle(order), start=1)


@dataclass
class TurnLog:
    """One turn as its user sent it: who, which conversation and turn, and the think time drawn
    before it (a user's first turn: the wait that spreads users out)."""

    user: int
    conversation: str
    turn: int  # from 1
    think_s: float

    def to_json(self) -> dict:
        return {"user": self.user, "conversation": self.conversation, "turn": self.turn, "think_s": self.think_s}


async def users_loop(client, model: str, plan: SessionPlan, users: int, state, seed: int) -> tuple[list, dict]:
    """`users` users, each from its own seeded generator, each turn sent through `state` (the
    pass's bookkeeping, window._Pass) so that the window counts turns as it counts requests. A
    conversation ends after its last turn, at a failed turn, or where its next turn would not
    fit max_model_len (the conversation so far is read from the server's `usage`); the user then
    thinks and starts the next one. Returns the tasks and each sent turn's TurnLog by send index."""
    conversations = plan.supply(seed)
    logs: dict[int, TurnLog] = {}

    async def user(number: int):
        rng = random.Random(f"{seed}-{number}")
        think = plan.think.first(rng)
        while state.sending():
            draw, conversation = next(conversations)
            history = [{"role": "system", "content": conversation.system}] if conversation.system else []
            context = conversation.system_tokens
            for place, turn in enumerate(conversation.turns, start=1):
                if place > 1 and not fits(context, turn, plan.max_model_len):
                    break
                await asyncio.sleep(think)
                message = {"role": "user", "content": turn.user}
                request = LoadRequest(
                    f"{conversation.id}/turn-{place}#{draw}", "", context + turn.user_tokens + 2 * MESSAGE_SLACK,
                    turn.max_tokens, [*history, message],
                )  # fmt: skip
                index = state.on_send(request) if state.sending() else None
                if index is None:
                    return
                logs[index] = TurnLog(number, conversation.id, place, think)
                streamed = await stream_request(client, model, request, "chat")
                state.on_finish(index, streamed)
                think = plan.think.draw(rng)
                result = streamed.result
                if not result.success:
                    break
                recorded = plan.reply == "recorded"
                history += [message, {"role": "assistant", "content": turn.reply if recorded else streamed.text}]
                context = result.prompt_tokens + (turn.reply_tokens if recorded else result.output_tokens)

    tasks = [asyncio.ensure_future(user(number)) for number in range(users)]
    await state.done.wait()
    return tasks, logs


def time_in_flight(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Requests in flight averaged over [start, end): each (sent, finished)'s overlap with it,
    summed, over its length."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in intervals) / (end - start) if end > start else 0.0


def session_figures(run, users: int) -> dict:
    """A users pass read through Little's law (docs/method.md#sessions): its counted turns'
    mean response time R (E2E latency) and the think time its users took before them, Z (from
    the previous turn's end; a user's first turn has none); the requests in flight averaged over
    the window, L; and the users that L implies, L x (R + Z) / R, against the users there were.
    Also the think time drawn against the one taken: a client late to its users' turns shows,
    and the server's prefix-cache hits over its queries."""
    ends: dict[int, float | None] = {}
    taken, drawn, response = [], [], []
    for streamed, counted, log in zip(run.results, run.counted, run.turns):
        result, previous = streamed.result, ends.get(log.user)
        ends[log.user] = streamed.sent_at + result.e2el if result.success else None
        if not counted:
            continue
        if result.success:
            response.append(result.e2el)
        if previous is not None:  # none before a user's first turn, or after a failed one
            taken.append(streamed.sent_at - previous)
            drawn.append(log.think_s)
    # Cancelled requests were in flight until the pass ended: one sent in the ramp may span the window.
    intervals = [(s.sent_at, s.sent_at + s.result.e2el) for s in run.results if s.result.success]
    intervals += [(run.started + c["sent_s"], run.started + run.ended_s) for c in run.cancelled]
    in_flight = (
        time_in_flight(intervals, run.started + run.opened_s, run.started + run.closed_s) if run.window_s else 0.0
    )
    mean_r = sum(response) / len(response) if response else None
    mean_z = sum(taken) / len(taken) if taken else None
    implied = in_flight * (mean_r + mean_z) / mean_r if mean_r and mean_z is not None else None
    queries, hits = (run.metrics.first_last(f"vllm:prefix_cache_{name}_total") for name in ("queries", "hits"))
    return {
        "users": users,
        "mean_in_flight": in_flight,
        "mean_response_s": mean_r,
        "mean_think_s": mean_z,
        "mean_think_drawn_s": sum(drawn) / len(drawn) if drawn else None,
        "users_from_littles_law": implied,
        "turns": len(response),
        # Over the whole pass, from the server's counters (None without /metrics or queries).
        "prefix_cache_hit_rate": (hits[1] - hits[0]) / (queries[1] - queries[0])
        if run.metrics.available and queries[1] > queries[0]
        else None,
    }
