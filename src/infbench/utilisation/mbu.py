"""Model bandwidth utilisation (MBU): how close a decode runs to what the memory allows. Each
decode step reads the weights once and the KV cache of every running request:

    bytes per step  = weight bytes + running x KV tokens per request x KV bytes per token
    steps per s     = 1 / TPOT                        (one token per running request a step)
    running         = output tokens/s x TPOT          (tokens a step, from the same figures)
    KV tokens       = mean prompt + mean output / 2   (the mean context over the decode)
    MBU             = bytes per step x steps per s / measured bandwidth (best triad pass)
                    = (weight bytes / TPOT + output tokens/s x KV tokens x KV bytes per token) / bandwidth

Prefill is left out (TPOT excludes it, the throughput's duration includes it), so MBU reads a
little low where prompts are long; activations and the KV written are left out too.
"""

from __future__ import annotations

from infbench.core.level_names import level_case
from infbench.model.folder import DTYPE_BYTES

FORMULA = (
    "MBU = (weight bytes / TPOT + output tokens/s x (mean prompt + mean output / 2) x KV bytes per token) / bandwidth"
)


def mbu(
    *,
    weight_bytes: int,
    kv_bytes_per_token: int,
    tpot_s: float,
    output_tok_s: float,
    kv_tokens: float,
    bandwidth: float,
) -> dict | None:
    if not tpot_s or not output_tok_s:
        return None
    bytes_per_s = weight_bytes / tpot_s + output_tok_s * kv_tokens * kv_bytes_per_token
    return {
        "mbu": bytes_per_s / bandwidth,
        "bytes_per_s": bytes_per_s,
        "running": output_tok_s * tpot_s,
        "kv_tokens": kv_tokens,
        "weights_share": weight_bytes / tpot_s / bytes_per_s,
    }


def model_bytes(facts: dict, dtype: str) -> tuple[int, int]:
    """(weight bytes, KV bytes per token) in the engines' dtype."""
    return facts["parameters"] * DTYPE_BYTES[dtype], facts["kv_bytes_per_token"][dtype]


def kv_tokens(requests: list[dict]) -> float:
    done = [r for r in requests if r.get("success", True)]
    return sum(r["prompt_tokens"] + r["output_tokens"] / 2 for r in done) / len(done)


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
        )
        if figures:
            case = level_case(
                level["request_rate"],
                level["max_concurrency"],
                level["burstiness"],
                level["ramp_end_rate"],
                level.get("api", "completions"),
            )
            rows.append({"stage": "serve", "case": case, **figures})
    return rows
