"""Model bandwidth utilisation (MBU): how close a decode runs to what the memory allows. Each
decode step reads the weights once and the KV cache of every running request:

    bytes per step  = weight bytes + running x KV tokens x KV bytes per token
    steps per s     = 1 / TPOT                        (one token per running request a step)
    running         = the server's running-requests gauge, averaged over the scrapes of each pass
                      at which anything ran (serving levels); output tokens/s x TPOT where there
                      is no gauge (offline)
    KV tokens       = sum((o - 1)(p + o/2)) / sum(o - 1)   (a request with o outputs decodes o - 1
                                                          steps, step j reading p + j tokens:
                                                          every step of every request weighs alike)
    MBU             = bytes per step x steps per s / bandwidth
                    = (weight bytes + running x KV tokens x KV bytes per token) / TPOT / bandwidth
    bandwidth       = the higher best pass of the machine's read and triad (reference_bandwidth)

Prefill is left out (TPOT excludes it, the throughput's duration includes it), so MBU reads a
little low where prompts are long; activations and the KV written are left out too.
"""

from __future__ import annotations

from infbench.core.level_names import level_name
from infbench.model.folder import DTYPE_BYTES

FORMULA = (
    "MBU = (weight bytes + running x KV tokens x KV bytes per token) / TPOT / bandwidth (the higher of the read "
    "and the triad); running from the server's gauge while anything ran (offline: output tok/s x TPOT), KV tokens = "
    "sum((o - 1)(p + o/2)) / sum(o - 1)"
)


def mbu(
    *,
    weight_bytes: int,
    kv_bytes_per_token: int,
    tpot_s: float,
    output_tok_s: float,
    kv_tokens: float | None,
    bandwidth: float,
    running: float | None = None,
) -> dict | None:
    """MBU of one decode; `running` from the server's gauge where it has one, else Little's law
    on the same figures (tokens a step = output tokens/s x seconds a step)."""
    if not tpot_s or not output_tok_s or kv_tokens is None:
        return None
    running_from = "gauge" if running is not None else "output tok/s x TPOT"
    running = running if running is not None else output_tok_s * tpot_s
    bytes_per_s = (weight_bytes + running * kv_tokens * kv_bytes_per_token) / tpot_s
    return {
        "mbu": bytes_per_s / bandwidth,
        "bytes_per_s": bytes_per_s,
        "running": running,
        "running_from": running_from,
        "kv_tokens": kv_tokens,
        "weights_share": weight_bytes / tpot_s / bytes_per_s,
    }


def reference_bandwidth(machine: dict) -> tuple[float, str, dict]:
    """The bandwidth MBU is computed against: the higher best pass of the read and the triad
    (the most this machine showed on the engine's cores; a read alone may not reach it where a
    reduction is bound by the cores), its method, and both best passes by kernel."""
    kernels = {"read": machine}
    if "triad" in machine:
        kernels["triad"] = machine["triad"]
    best = {name: record["best_bytes_per_s"] for name, record in kernels.items()}
    used = max(best, key=best.get)
    return best[used], kernels[used]["method"], best


def model_bytes(facts: dict, dtype: str) -> tuple[int, int]:
    """(weight bytes, KV bytes per token) in the engines' dtype."""
    return facts["parameters"] * DTYPE_BYTES[dtype], facts["kv_bytes_per_token"][dtype]


def kv_tokens(requests: list[dict]) -> float | None:
    """The mean context of a decode step, weighted by steps: a request with o outputs decodes
    o - 1 of them (the first comes from prefill), step j reading p + j tokens, a mean of p + o/2:
    sum((o - 1)(p + o/2)) / sum(o - 1). None where no request decoded."""
    decoded = [r for r in requests if r.get("success", True) and r["output_tokens"] >= 2]
    steps = sum(r["output_tokens"] - 1 for r in decoded)
    if not steps:
        return None
    return sum((r["output_tokens"] - 1) * (r["prompt_tokens"] + r["output_tokens"] / 2) for r in decoded) / steps


def mean_running(level: dict) -> float | None:
    """The running-requests gauge averaged over the scrapes inside each pass's measured span (a
    windowed pass: its window; else the whole pass) at which anything ran (TPOT is a rate while
    decoding, so the gauge is taken while decoding too; none where the server publishes no
    /metrics)."""

    def span(repeat: dict) -> tuple[float, float]:
        window = repeat.get("window")
        return (window["opened_s"], window["closed_s"]) if window else (0.0, repeat["duration"])

    values = [
        sample["vllm:num_requests_running"]
        for repeat in level["repeats"]
        for start, end in [span(repeat)]
        for sample in repeat.get("metrics_series", [])
        if start <= sample["t"] <= end and sample.get("vllm:num_requests_running", 0) >= 1
    ]
    return sum(values) / len(values) if values else None


def offline_rows(engine: str, artifact: dict, weight_bytes: int, kv_per_token: int, bandwidth: float) -> list[dict]:
    rows = []
    for scenario in artifact["scenarios"]:
        summary = scenario["summary"]
        figures = mbu(
            weight_bytes=weight_bytes,
            kv_bytes_per_token=kv_per_token,
            tpot_s=summary["mean_tpot_ms"]["mean"] / 1000,
            output_tok_s=summary["output_throughput"]["mean"],
            kv_tokens=kv_tokens(scenario["requests"]),
            bandwidth=bandwidth,
        )
        if figures:
            rows.append({"stage": engine, "case": scenario["name"], **figures})
    return rows


def serving_rows(load: dict, weight_bytes: int, kv_per_token: int, bandwidth: float) -> list[dict]:
    rows = []
    for level in load["levels"]:
        requests = [r for repeat in level["repeats"] for r in repeat["requests"]]
        figures = mbu(
            weight_bytes=weight_bytes,
            kv_bytes_per_token=kv_per_token,
            tpot_s=level["mean_tpot_ms"] / 1000,
            output_tok_s=level["output_throughput"],
            kv_tokens=kv_tokens(requests),
            bandwidth=bandwidth,
            running=mean_running(level),
        )
        if figures:
            case = level_name(level)
            rows.append({"stage": "serve", "case": case, **figures})
    return rows
