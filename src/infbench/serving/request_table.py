"""Every request a stage timed, one row each, in a CSV file beside the stage's JSON artifact
(`load.requests.csv`, `capacity.requests.csv`), for users' own tools (pandas, polars, DuckDB, a
spreadsheet). Its columns: docs/method.md#request-tables."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from infbench.core.artifacts import write_text_atomic
from infbench.core.level_names import level_case, level_name
from infbench.core.metrics import failure_cause
from infbench.serving.client import StreamedResult

COLUMNS = (
    "run", "measurement", "pass", "counted", "request_id", "scheduled_s", "sent_s", "first_token_s",
    "last_token_s", "prompt_tokens", "output_tokens", "success", "failure_cause", "error",
)  # fmt: skip


def streamed_record(streamed: StreamedResult, started: float) -> dict:
    """One request as the client saw it: vLLM's fields, when it was sent from its pass's start
    (`started`, perf_counter), and (open loop) when it was scheduled, its send lag and its client
    queue time."""
    record = {**streamed.result.to_json(), "sent_s": streamed.sent_at - started}
    if streamed.scheduled_s is not None:
        record.update(
            scheduled_s=streamed.scheduled_s,
            send_lag_s=streamed.ready_at - (started + streamed.scheduled_s),
            client_queue_s=streamed.sent_at - streamed.ready_at,
        )
    return record


def seconds(value: float | None) -> float | None:
    """A time to the microsecond, far finer than anything the table is read for."""
    return None if value is None else round(value, 6)


def table_rows(records: list[dict], *, run: int, measurement: str, pass_number: int, counted: bool) -> list[dict]:
    """Rows of one pass's request records (as `streamed_record` and load.json write them). A
    failed request has no first or last token."""
    rows = []
    for record in records:
        done, sent = record["success"], record["sent_s"]
        rows.append(
            {
                "run": run,
                "measurement": measurement,
                "pass": pass_number,
                "counted": counted,
                "request_id": record["request_id"],
                "scheduled_s": seconds(record.get("scheduled_s")),
                "sent_s": seconds(sent),
                "first_token_s": seconds(sent + record["ttft"]) if done else None,
                "last_token_s": seconds(sent + record["e2el"]) if done else None,
                "prompt_tokens": record["prompt_tokens"],
                "output_tokens": record["output_tokens"],
                "success": done,
                "failure_cause": None if done else failure_cause(record["error"]),
                "error": record["error"],
            }
        )
    return rows


def level_rows(levels: list[dict]) -> list[dict]:
    """The rows of load.json's levels: every repeat's counted and uncounted requests."""
    rows = []
    for level in levels:
        for number, repeat in enumerate(level["repeats"], start=1):
            where = {"run": 1, "measurement": level_name(level), "pass_number": number}
            rows += table_rows(repeat["requests"], counted=True, **where)
            rows += table_rows(repeat.get("uncounted_requests", []), counted=False, **where)
    return rows


def probe_name(mode: str, load: float, api: str, trace_scale: float | None) -> str:
    """A capacity probe named as a serving level: c=8, rate=2.5/s, trace x1.5."""
    if mode == "concurrency":
        return level_case(None, int(load), api=api)
    return level_case(load, None, api=api, trace_scale=trace_scale)


def write_table(path: str | Path, rows: list[dict]) -> dict:
    """The rows as CSV (written whole or not at all; None as an empty field); what the JSON
    artifact records of it."""
    text = io.StringIO()
    writer = csv.DictWriter(text, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(path, text.getvalue())
    return {"file": Path(path).name, "rows": len(rows), "columns": list(COLUMNS)}


def window_rows(run, *, measurement: str, pass_number: int) -> list[dict]:
    """The rows of a windowed pass (window.WindowRun): every request that finished, counted or
    not; run 1 (search_runs numbers a capacity stage's runs)."""
    records = [streamed_record(s, run.started) for s in run.results]
    return [
        row
        for record, counted in zip(records, run.counted)
        for row in table_rows([record], run=1, measurement=measurement, pass_number=pass_number, counted=counted)
    ]
