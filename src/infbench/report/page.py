"""The page's parts outside the numbered sections: each model's header (its facts and the
workload every stage ran) and provenance, and the run time of every rule."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from infbench.report.tables import fmt


def model_view(facts: dict) -> dict:
    """A model's facts as its header lists them."""
    source = facts["source"]
    return {
        "architecture": facts["architecture"],
        "parameters": f"{facts['parameters']:,}",
        "layers": facts["num_layers"],
        "kv_heads": facts["num_kv_heads"],
        "head_dim": facts["head_dim"],
        "source": source["kind"],
        # Whichever of these the source records, each in brackets after its kind.
        "source_details": [source[key] for key in ("id", "package", "path") if source.get(key)],
        "kv_bytes_per_token": [(dtype, f"{size:,}") for dtype, size in facts["kv_bytes_per_token"].items()],
    }


def workload_source_text(summary: dict | None) -> str:
    """Where the requests came from, and what was dropped, in one sentence."""
    if not summary:
        return ""
    source = summary["source"]
    if source["kind"] == "synthetic":
        text = f"synthetic prompts, {source['kept']} requests of the {source['preset']} length preset"
    elif source["kind"] == "trace":
        rate = f"{source['rate']:.2f} req/s" if source["rate"] is not None else "all at one instant"
        text = (
            f"the first {source['kept']} requests that fit max_model_len (of {source['requested']} asked) of the trace "
            f"{source['path']} ({source['format']}, SHA-256 {source['sha256'][:12]}…, {source['rows_in_source']} "
            f"rows), replayed at their arrival times: {source['span_s']:.1f} s, {rate}; "
            f"{source['dropped']['too_long']} dropped as longer than max_model_len"
        )
        if source["rows_unusable"]:
            text += f", {source['rows_unusable']} row(s) without a prompt or a response skipped"
    else:
        dropped = source["dropped"]
        text = (
            f"{source['kept']} of the requested {source['requested']} requests sampled (seeded) from "
            f"{source['path']} ({source['format']}, SHA-256 {source['sha256'][:12]}…, "
            f"{source['rows_in_source']} rows): "
            f"{source['rows_examined']} rows tried, {dropped['too_long']} dropped as longer than max_model_len, "
            f"{dropped['too_short']} as under 4 tokens"
        )
        if source["rows_unusable"]:
            text += f", {source['rows_unusable']} conversation(s) without a prompt and a reply skipped"
    if summary["api"] == "chat":
        text += f"; every prompt through the model's chat template (SHA-256 {summary['chat_template_sha256'][:12]}…)"
    else:
        text += "; prompts sent as they are (completions API)"
    return text + "."


def workload_view(workload: list[dict] | None, summary: dict | None = None) -> dict | None:
    """The workload every stage ran; None where there is none."""
    if not workload:
        return None
    frame = pd.DataFrame(workload)
    prompt, output = frame["prompt_tokens"].describe(), frame["max_tokens"].describe()
    return {
        "count": len(frame),
        "prompt_mean": fmt(prompt["mean"], 1),
        "prompt_min": fmt(prompt["min"], 0),
        "prompt_max": fmt(prompt["max"], 0),
        "output_mean": fmt(output["mean"], 1),
        "source": workload_source_text(summary),
        "table": frame[["id", "kind", "api", "prompt_tokens", "max_tokens", "prompt"]],
    }


def provenance_view(artifacts: dict) -> dict | None:
    """Where and with what a model was measured, from its first measured artifact."""
    provenance = next(
        (artifacts[k]["provenance"] for k in ("vllm_offline", "hf_baseline", "load") if artifacts.get(k)), None
    )
    if provenance is None:
        return None
    machine, git = provenance["machine"], provenance["git"]
    return {
        "cpu": machine["cpu"]["model"],
        "logical_cores": machine["cpu"]["logical_cores"],
        "simd_flags": ", ".join(machine["cpu"]["simd_flags"]),
        "memory_gib": fmt((machine["memory_bytes"] or 0) / 2**30, 1),
        "device": machine["device"],
        "versions": list(provenance["versions"].items()),
        "commit": git["commit"] or "not a git checkout",
        "dirty": git["dirty"],
        "started": provenance["started"],
        "finished": provenance["finished"],
    }


def read_benchmarks(paths: list[str]) -> pd.DataFrame:
    rows = []
    for path in paths:
        with open(path) as handle:
            record = next(csv.DictReader(handle, delimiter="\t"))
        rows.append(
            {
                "rule": Path(path).stem,
                "model": Path(path).parent.name,
                "seconds": float(record["s"]),
                "max RSS MiB": float(record["max_rss"]) if record.get("max_rss", "-") not in ("-", "NA") else None,
            }
        )
    return pd.DataFrame(rows)
