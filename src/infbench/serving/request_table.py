"""Every request a stage sent in its timed passes, one row each, in a CSV file beside the
stage's JSON artifact (`load.requests.csv`, `capacity.requests.csv`), for users' own tools
(pandas, polars, DuckDB, a spreadsheet). Its columns: docs/method.md#request-tables."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from infbench.core.artifacts import write_text_atomic
from infbench.core.level_names import level_case, level_name
from infbench.core.metrics import RequestResult, failure_cause, meets_slo
from infbench.serving.client import unix_time
from infbench.serving.window import streamed_record

COLUMNS = (
    "run", "measurement", "request_rate", "max_concurrency", "pass", "pass_started_unix", "counted", "request_id",
    "scheduled_s", "sent_s", "first_token_s", "last_token_s", "prompt_tokens", "max_tokens", "output_tokens",
    "success", "met_slo", "failure_cause", "error", "user", "conversation", "turn", "think_s",
)  # fmt: skip


def seconds(value: float | None) -> float | None:
    """A time to the microsecond, far finer than anything the table is read for."""
    return None if value is None else round(value, 6)


def met_slo(record: dict, slo_ms: dict) -> bool | None:
    """Whether the request met every SLO (core/metrics.py meets_slo); None where none is set."""
    if not slo_ms:
        return None
    if not record["success"]:  # no latencies to judge
        return False
    fields = ("request_id", "prompt_tokens", "output_tokens", "ttft", "e2el")
    return meets_slo(RequestResult(*(record[f] for f in fields)), slo_ms)


def table_rows(records: list[tuple[dict, bool]], where: dict, slo_ms: dict) -> list[dict]:
    """Rows of one pass's (request record, counted) pairs, records as `streamed_record` and
    load.json write them, in send order; `where`: the pass's leading columns (run to
    pass_started_unix). A failed request has no first or last token."""
    rows = []
    for record, counted in sorted(records, key=lambda pair: pair[0]["sent_s"]):
        done, sent = record["success"], record["sent_s"]
        rows.append(
            {
                **where,
                "counted": counted,
                "request_id": record["request_id"],
                "scheduled_s": seconds(record.get("scheduled_s")),
                "sent_s": seconds(sent),
                "first_token_s": seconds(sent + record["ttft"]) if done else None,
                "last_token_s": seconds(sent + record["e2el"]) if done else None,
                "prompt_tokens": record["prompt_tokens"],
                "max_tokens": record.get("max_tokens"),  # runs made before it was recorded lack it
                "output_tokens": record["output_tokens"],
                "success": done,
                "met_slo": met_slo(record, slo_ms),
                "failure_cause": None if done else failure_cause(record["error"]),
                "error": record["error"],
                **{key: record.get(key) for key in ("user", "conversation", "turn")},
                "think_s": seconds(record.get("think_s")),
            }
        )
    return rows


def finite_rate(rate) -> float | None:
    """A level's request rate as a number; None for a closed loop (vLLM's "inf")."""
    return None if rate in (None, "inf") or math.isinf(float(rate)) else float(rate)


def level_rows(levels: list[dict], slo_ms: dict) -> list[dict]:
    """The rows of load.json's levels: every repeat's counted, uncounted and cancelled requests."""
    rows = []
    for level in levels:
        for number, repeat in enumerate(level["repeats"], start=1):
            where = {
                "run": 1, "measurement": level_name(level),
                # A session ramp's rates are sessions a second, not requests: named only.
                "request_rate": None if level["mode"] == "session_ramp" else finite_rate(level["request_rate"]),
                "max_concurrency": None if level["mode"] in ("users", "session_ramp") else level["max_concurrency"],
                "pass": number,
                "pass_started_unix": repeat.get("started_unix"),
            }  # fmt: skip
            records = [(r, True) for r in repeat["requests"]]
            records += [(r, False) for r in repeat.get("uncounted_requests", []) + repeat.get("cancelled_requests", [])]
            rows += table_rows(records, where, slo_ms)
    return rows


def probe_rows(run, *, mode: str, load: float, api: str, burstiness: float, trace_scale: float | None,
               pass_number: int, slo_ms: dict) -> list[dict]:  # fmt: skip
    """The rows of a capacity probe's windowed pass (window.WindowRun): every request it sent,
    counted, uncounted or cancelled; run 1 (search_runs numbers a capacity stage's runs). The
    probe is named as a serving level: c=8, rate=2.5/s, trace x1.5; users: users=8, each turn
    with its user, conversation, turn and the think time drawn before it."""
    closed = mode != "request_rate"
    where = {
        "run": 1,
        "measurement": f"users={int(load)}"
        if mode == "users"
        else f"sessions={load:g}/s"
        if mode == "session_rate"
        else level_case(
            None if closed else load, int(load) if closed else None, None if trace_scale else burstiness,
            api=api, trace_scale=trace_scale,
        ),
        "request_rate": None if closed else load,  # a session rate is not a request rate: named only
        "max_concurrency": int(load) if mode == "concurrency" else None,
        "pass": pass_number,
        "pass_started_unix": unix_time(run.started),
    }  # fmt: skip
    records = [(streamed_record(s, run.started), counted) for s, counted in zip(run.results, run.counted)]
    if run.turns is not None:
        records = [({**record, **turn.to_json()}, counted) for (record, counted), turn in zip(records, run.turns)]
    return table_rows(records + [(r, False) for r in run.cancelled], where, slo_ms)


def write_table(path: str | Path, rows: list[dict]) -> dict:
    """The rows as CSV (written whole or not at all; None as an empty field); what the JSON
    artifact records of it."""
    text = io.StringIO()
    writer = csv.DictWriter(text, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(path, text.getvalue())
    return {"file": Path(path).name, "rows": len(rows), "columns": list(COLUMNS)}
