"""Per-request latency metrics and their aggregation, with vLLM's benchmark definitions
(`vllm bench serve`) and field names, so figures can be put beside theirs:

    TTFT  = time from sending the request to its first output token
    E2EL  = time from sending the request to its last output token
    TPOT  = (E2EL - TTFT) / (output_tokens - 1), only for outputs of more than one token
    ITL   = gaps between successive output chunks, pooled over all requests
    request_throughput     = completed / duration
    output_throughput      = total output tokens / duration
    total_token_throughput = (total input + total output tokens) / duration
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from infbench.core.stats import percentile

PERCENTILES = (50, 90, 95, 99)
MS = 1000.0


@dataclass
class RequestResult:
    """One request as the client saw it; times in seconds."""

    request_id: str
    prompt_tokens: int
    output_tokens: int
    ttft: float
    e2el: float
    itl: list[float] = field(default_factory=list)
    success: bool = True
    error: str | None = None

    @property
    def tpot(self) -> float | None:
        return tpot(self.e2el, self.ttft, self.output_tokens)

    def to_json(self) -> dict:
        record = asdict(self)
        record["tpot"] = self.tpot
        return record


# The openai SDK's and aiohttp's names for a connection refused, reset or cut mid-stream.
CONNECTION_ERRORS = {
    "APIConnectionError", "ClientConnectorError", "ClientOSError", "ServerDisconnectedError", "ClientPayloadError",
    "ConnectionResetError", "ConnectionRefusedError",
}  # fmt: skip


def failure_cause(error: str | None) -> str:
    """A failed request's cause as the report groups them, from its recorded error: its HTTP
    status, a timeout (server.request_timeout_s), a malformed stream (a reply the client could
    not read as server-sent events with a choice), else the error's type."""
    text = error or ""
    status = re.search(r"\b(?:HTTP|Error code:) (\d{3})\b", text)
    if status:
        return f"HTTP {status.group(1)}"
    if text.startswith(("TimeoutError", "APITimeoutError")):
        return "timeout"
    if text.startswith("MalformedStream"):
        return "malformed stream"
    if text.startswith("StreamError"):
        return "error in the stream"
    kind = text.split(":", 1)[0]
    if kind in CONNECTION_ERRORS:
        return "connection"
    return kind or "unknown"


def failures_by_cause(results: list[RequestResult]) -> dict[str, int]:
    """Failed requests counted by failure_cause, the most common first (ties by name)."""
    counts = Counter(failure_cause(r.error) for r in results if not r.success)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def failures_text(results: list[RequestResult]) -> str:
    """e.g. "4 of 6 requests failed: 2 HTTP 500, 1 timeout, 1 malformed stream"."""
    causes = failures_by_cause(results)
    failed = sum(causes.values())
    listed = ", ".join(f"{count} {cause}" for cause, count in causes.items())
    return f"{failed} of {len(results)} requests failed" + (f": {listed}" if listed else "")


def tpot(e2el: float, ttft: float, output_tokens: int) -> float | None:
    """Time per output token after the first: (E2EL - TTFT) / (output_tokens - 1)."""
    if output_tokens <= 1:
        return None
    return (e2el - ttft) / (output_tokens - 1)


def itl_from_token_times(start: float, token_times: list[float]) -> tuple[float, list[float]]:
    """(TTFT, ITL gaps) from the send time and each output chunk's arrival time."""
    if not token_times:
        return math.nan, []
    gaps = [later - earlier for earlier, later in zip(token_times, token_times[1:])]
    return token_times[0] - start, gaps


def distribution(name: str, values_s: list[float]) -> dict:
    """mean/median/std/pXX of a latency in milliseconds, vLLM-style field names.
    std is the population standard deviation, as vLLM's benchmark reports it."""
    values = np.asarray(values_s, dtype=float) * MS
    if values.size == 0:
        fields = {f"mean_{name}_ms": math.nan, f"median_{name}_ms": math.nan, f"std_{name}_ms": math.nan}
        fields.update({f"p{q}_{name}_ms": math.nan for q in PERCENTILES})
        return fields
    fields = {
        f"mean_{name}_ms": float(values.mean()),
        f"median_{name}_ms": float(np.median(values)),
        f"std_{name}_ms": float(values.std()),
    }
    fields.update({f"p{q}_{name}_ms": percentile(values, q) for q in PERCENTILES})
    return fields


def aggregate(results: list[RequestResult], duration_s: float) -> dict:
    """Scenario-level metrics over the successful requests."""
    done = [r for r in results if r.success]
    total_in = sum(r.prompt_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    summary = {
        "duration": duration_s,
        "completed": len(done),
        "failed": len(results) - len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / duration_s,
        "output_throughput": total_out / duration_s,
        "total_token_throughput": (total_in + total_out) / duration_s,
    }
    summary.update(distribution("ttft", [r.ttft for r in done]))
    summary.update(distribution("tpot", [r.tpot for r in done if r.tpot is not None]))
    summary.update(distribution("itl", [gap for r in done for gap in r.itl]))
    summary.update(distribution("e2el", [r.e2el for r in done]))
    return summary


def meets_slo(result: RequestResult, slo_ms: dict) -> bool:
    """A request that succeeded with every latency given (ttft, tpot, e2el in ms) within its SLO;
    a one-token output has no TPOT and meets that SLO."""
    latencies = {"ttft": result.ttft, "tpot": result.tpot if result.tpot is not None else 0.0, "e2el": result.e2el}
    return result.success and all(latencies[key] * MS <= limit for key, limit in slo_ms.items())


def goodput(results: list[RequestResult], duration_s: float, slo_ms: dict) -> float:
    """Requests per second that meet every SLO given (ttft, tpot, e2el in ms)."""
    return sum(1 for r in results if meets_slo(r, slo_ms)) / duration_s
