"""Serving levels named alike everywhere: this pipeline's levels, vLLM's result files, MBU rows."""

from __future__ import annotations

import math


def level_case(
    request_rate, max_concurrency, burstiness=None, ramp_end_rate=None, api="completions", trace_scale=None
) -> str:
    """A serving level's name, the same for this pipeline's levels and vLLM's result files:
    c=4 (closed loop), rate=2/s, rate=2/s c<=4 (capped), ramp 2-16/s, trace x2 (a trace
    replayed twice as fast); burstiness when not 1; `chat ` before levels sent through the
    chat API."""
    rate = math.inf if request_rate in (None, "inf") else float(request_rate)
    prefix = "chat " if api == "chat" else ""
    if trace_scale is not None:
        name = f"{prefix}trace x{float(trace_scale):g}"
    elif ramp_end_rate is not None:
        name = f"{prefix}ramp {rate:g}-{float(ramp_end_rate):g}/s"
    elif math.isinf(rate):
        return f"{prefix}c={max_concurrency}"
    else:
        name = f"{prefix}rate={rate:g}/s"
    if max_concurrency is not None:
        name += f" c<={max_concurrency}"
    if burstiness is not None and float(burstiness) != 1.0:
        name += f" burstiness {float(burstiness):g}"
    return name


def level_name(level: dict) -> str:
    """level_case of one of this pipeline's level records (runs made before chat levels or
    trace levels existed lack those fields); users=N for N users in chat sessions, sessions
    0.5-4/s for sessions starting on a ramp."""
    if level.get("mode") == "users":
        return f"users={level['max_concurrency']}"
    if level.get("mode") == "session_ramp":
        shape = f" burstiness {float(level['burstiness']):g}" if float(level["burstiness"]) != 1.0 else ""
        return f"sessions {float(level['request_rate']):g}-{float(level['ramp_end_rate']):g}/s{shape}"
    return level_case(
        level["request_rate"],
        level["max_concurrency"],
        level["burstiness"],
        level["ramp_end_rate"],
        level.get("api", "completions"),
        level.get("trace_scale"),
    )
