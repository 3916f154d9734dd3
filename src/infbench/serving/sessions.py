"""Users in multi-turn chat sessions (docs/method.md#sessions): each user holds a conversation,
every turn carrying the conversation so far (the model's own replies, or the recorded ones)
through /v1/chat/completions, and thinks between a reply's end and their next turn.
`users_loop` runs a closed loop of users inside a windowed pass (serving/window.py),
`sessions_open_loop` sessions that start on a schedule; `session_figures` reads a pass back
through Little's law.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from infbench.core.capacity_terms import THINK_LATE, USERS_HELD
from infbench.serving.client import LoadRequest, stream_request
from infbench.workload.requests import Prompts
from infbench.workload.sessions import (
    MESSAGE_SLACK,
    Conversation,
    ThinkTime,
    build_conversations,
    fits,
    turn_footprints,
)


@dataclass(frozen=True)
class SessionPlan:
    conversations: list[Conversation]
    think: ThinkTime
    reply: str  # model | recorded
    max_model_len: int
    # Sessions on a schedule: seconds from the pass's start until its window opens, the sessions
    # alive then near their steady number (measure.sessions_ramp_s).
    ramp_s: float = 0.0

    def supply(self, seed: int) -> Iterator[tuple[int, Conversation]]:
        """Conversations in a seeded order, round and round, each with its draw number."""
        order = list(self.conversations)
        random.Random(seed).shuffle(order)
        return enumerate(itertools.cycle(order), start=1)


# What asks a stage for sessions, and the way out, as a model without a chat template's error names them.
ASKED_BY = {
    "serve": (
        "users in chat sessions (load.users or load.session_ramp)",
        "set load.users: [] and load.session_ramp: null",
    ),
    "capacity": ("the users search (sessions.capacity)", "set sessions.capacity: false"),
}


def session_plan(settings: dict | None, model_dir, pool: list[dict], max_model_len: int, seed: int, stage: str,
                 tokenizer=None):  # fmt: skip
    """The sessions of config section `settings` (None: none are measured, None returned) and
    their source, their turns rendered through the model's chat template (`tokenizer`, the
    model's where the caller has it loaded); `stage` (ASKED_BY) names what asked for them."""
    if settings is None:
        return None, None
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = Prompts(tokenizer, "chat", *ASKED_BY[stage])  # a model without a chat template stops here
    conversations, source = build_conversations(
        tokenizer, pool, settings, max_model_len, seed, lambda messages: prompts.render_messages(messages)[1]
    )
    think = ThinkTime(settings["think_s"], settings["think"])
    return SessionPlan(conversations, think, settings["reply"], max_model_len), source


@dataclass
class TurnLog:
    """One turn as its user sent it: who, which conversation and turn, the think time drawn
    before it (a user's first turn: the wait that spreads users out), and when it ended (None:
    cut off at the pass's end), failed or not."""

    user: int
    conversation: str
    turn: int  # from 1
    think_s: float
    ended_at: float | None = None  # perf_counter

    def to_json(self) -> dict:
        return {"user": self.user, "conversation": self.conversation, "turn": self.turn, "think_s": self.think_s}


def virtual_history(conversation: Conversation, start: int) -> tuple[list[dict], int]:
    """The conversation as if its first `start` turns had been held, with their recorded replies:
    its messages and its tokens before the next turn (docs/method.md#sessions)."""
    history = [{"role": "system", "content": conversation.system}] if conversation.system else []
    context = conversation.base_tokens
    for turn in conversation.turns[:start]:
        history += [{"role": "user", "content": turn.user}, {"role": "assistant", "content": turn.reply}]
        context += turn.user_tokens + 2 * MESSAGE_SLACK + turn.reply_tokens
    return history, context


async def converse(client, model: str, plan: SessionPlan, state, logs: dict, user: int, rng, think: float,
                   draw: int, conversation: Conversation, start: int = 0,
                   scheduled_s: float | None = None) -> float | None:  # fmt: skip
    """One conversation held by `user` from turn `start` (from 0; its earlier turns a virtual
    history), each turn sent `think` seconds after the last ended (the first after `think` as
    given) through `state` (the pass's bookkeeping, window._Pass), so that the window counts
    turns as it counts requests, and logged in `logs` by send index. `scheduled_s`: a session
    on a schedule's arrival, from the pass's start, against which its first turn's send lag is
    kept. It ends after its last turn,
    at a failed turn, or where its next turn would not fit max_model_len (the conversation so far
    from the server's `usage`). Returns the think time drawn after its last turn; None where the
    pass ended first."""
    history, context = virtual_history(conversation, start)
    recorded = plan.reply == "recorded"
    for place, turn in enumerate(conversation.turns[start:], start=start + 1):
        if place > 1 and not fits(context, turn, plan.max_model_len):
            break
        if not await state.pause(think):
            return None
        message = {"role": "user", "content": turn.user}
        request = LoadRequest(
            f"{conversation.id}/turn-{place}#{draw}", "", context + turn.user_tokens + 2 * MESSAGE_SLACK,
            turn.max_tokens, [*history, message],
        )  # fmt: skip
        timed = scheduled_s if place == start + 1 else None  # a session's first turn keeps its schedule
        index = state.on_send(request, timed) if state.sending() else None
        if index is None:
            return None
        if timed is not None:
            ready = time.perf_counter()
            state.send_lag[index] = ready - (state.started + timed)
        logs[index] = log = TurnLog(user, conversation.id, place, think)
        streamed = await stream_request(client, model, request, "chat")
        log.ended_at = time.perf_counter()
        if timed is not None:
            streamed.ready_at, streamed.scheduled_s = ready, timed
        state.on_finish(index, streamed)
        think = plan.think.draw(rng)
        result = streamed.result
        if not result.success:
            break
        history += [message, {"role": "assistant", "content": turn.reply if recorded else streamed.text}]
        context = result.prompt_tokens + (turn.reply_tokens if recorded else result.output_tokens)
    return think


async def users_loop(client, model: str, plan: SessionPlan, users: int, state, seed: int) -> tuple[list, dict]:
    """`users` users (a closed loop), each from its own seeded generator, holding one
    conversation after another, thinking between them as between turns. A user's first
    conversation starts at a turn drawn uniformly from those that fit, its earlier turns a
    virtual history, so that users are spread over their conversations from the start. Returns
    the tasks and each sent turn's TurnLog by send index."""
    conversations = plan.supply(seed)
    logs: dict[int, TurnLog] = {}

    async def user(number: int):
        rng = random.Random(f"{seed}-{number}")
        think, first = plan.think.first(rng), True
        while think is not None and state.sending():
            draw, conversation = next(conversations)
            start = rng.randrange(len(turn_footprints(conversation, "recorded", plan.max_model_len))) if first else 0
            first = False
            think = await converse(client, model, plan, state, logs, number, rng, think, draw, conversation, start)

    tasks = [asyncio.ensure_future(user(number)) for number in range(users)]
    await state.done.wait()
    return tasks, logs


async def sessions_open_loop(client, model: str, plan: SessionPlan, offsets: list[float], state, seed: int,
                             whole: bool = False):  # fmt: skip
    """A new session at `state.started` + each offset (an open loop of sessions): one
    conversation from its first turn, sent on arrival (its send lag kept), its later turns after
    think times, each session a `user` of its own in the logs. The window opens plan.ramp_s after
    the pass's start; `whole`: at once, and the pass ends when every session has (a ramp).
    Returns the tasks and the TurnLogs."""
    conversations = plan.supply(seed)
    logs: dict[int, TurnLog] = {}
    tasks = []

    async def session(number: int, offset: float):
        rng = random.Random(f"{seed}-{number}")
        draw, conversation = next(conversations)
        await converse(client, model, plan, state, logs, number, rng, 0.0, draw, conversation, scheduled_s=offset)

    async def ramp():
        await asyncio.sleep(max(0.0, state.started + plan.ramp_s - time.perf_counter()))
        state.open_window()

    if whole:  # every turn counted, the first session's too
        state.open_window()

    async def dispatch():
        for number, offset in enumerate(offsets):
            await asyncio.sleep(max(0.0, state.started + offset - time.perf_counter()))
            if not state.sending():
                return
            tasks.append(asyncio.ensure_future(session(number, offset)))
        if whole:
            await asyncio.gather(*tasks, return_exceptions=True)
            state.finish()
        else:
            state.stop_sending()  # the schedule ran out

    dispatcher, opener = asyncio.ensure_future(dispatch()), asyncio.ensure_future(ramp())
    await state.done.wait()
    dispatcher.cancel()
    opener.cancel()
    return [dispatcher, opener, *tasks], logs


def time_in_flight(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Requests in flight averaged over [start, end): each (sent, finished)'s overlap with it,
    summed, over its length."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in intervals) / (end - start) if end > start else 0.0


def session_figures(run, users: int) -> dict:
    """A users pass read through Little's law (docs/method.md#sessions): its counted turns'
    mean response time R (send to end, failed turns too) and the think time its users took
    before them, Z (from the user's previous turn's end; a user's first turn has none); the
    requests in flight averaged over the window, L; and the users that L implies, L x (R + Z) / R,
    against the users there were. Also the think time drawn against the one taken (a client
    late to its users' turns), the counted turns' mean place in their conversation and prompt
    tokens, and the server's prefix-cache hits over its queries."""
    ends: dict[int, float] = {}
    taken, drawn, response, places, prompts = [], [], [], [], []
    for streamed, counted, log in zip(run.results, run.counted, run.turns):
        previous = ends.get(log.user)
        ends[log.user] = log.ended_at
        if not counted:
            continue
        response.append(log.ended_at - streamed.sent_at)
        places.append(log.turn)
        if streamed.result.success:
            prompts.append(streamed.result.prompt_tokens)
        if previous is not None:  # none before a user's first turn
            taken.append(streamed.sent_at - previous)
            drawn.append(log.think_s)
    # Cut off at the pass's end, a turn was in flight until then: one sent in the ramp may span the window.
    intervals = [(s.sent_at, log.ended_at) for s, log in zip(run.results, run.turns)]
    intervals += [(run.started + c["sent_s"], run.started + run.ended_s) for c in run.cancelled]
    in_flight = (
        time_in_flight(intervals, run.started + run.opened_s, run.started + run.closed_s) if run.window_s else 0.0
    )

    def mean(values):
        return sum(values) / len(values) if values else None

    mean_r, mean_z = mean(response), mean(taken)
    implied = in_flight * (mean_r + mean_z) / mean_r if mean_r and mean_z is not None else None
    queries, hits = (run.metrics.first_last(f"vllm:prefix_cache_{name}_total") for name in ("queries", "hits"))
    return {
        "users": users,
        "mean_in_flight": in_flight,
        "mean_response_s": mean_r,
        "mean_think_s": mean_z,
        "mean_think_drawn_s": mean(drawn),
        "users_from_littles_law": implied,
        "turns": len(response),
        "mean_turn": mean(places),
        "mean_prompt_tokens": mean(prompts),
        # Over the whole pass, from the server's counters (None without /metrics or queries).
        "prefix_cache_hit_rate": (hits[1] - hits[0]) / (queries[1] - queries[0])
        if run.metrics.available and queries[1] > queries[0]
        else None,
    }


def users_not_held(figures: dict) -> bool:
    """Little's law's users, L x (R + Z) / R, lie more than USERS_HELD off the users that ran."""
    implied = figures["users_from_littles_law"]
    return implied is not None and abs(implied / figures["users"] - 1) > USERS_HELD


def cycles_in(figures: dict, window_s: float) -> float:
    """A user's cycles, a turn and its think time (R + Z), in a window of `window_s`; users_held
    is judged from HELD_CYCLES."""
    return window_s / (figures["mean_response_s"] + figures["mean_think_s"])


def thinking_late(figures: dict) -> bool:
    """The users' think time as taken exceeds the one drawn by more than THINK_LATE: the client
    was late to their turns, so it offered less load than its users."""
    taken, drawn = figures["mean_think_s"], figures["mean_think_drawn_s"]
    return bool(drawn) and taken is not None and taken > (1 + THINK_LATE) * drawn


def pooled_session_figures(passes: list[dict]) -> dict:
    """Several passes' session_figures at one number of users, each the mean over the passes
    (None where no pass has one)."""

    def mean(key):
        values = [p[key] for p in passes if p[key] is not None]
        return sum(values) / len(values) if values else None

    return {"users": passes[0]["users"], **{key: mean(key) for key in passes[0] if key != "users"}}
