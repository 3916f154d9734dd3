"""Timestamped traces of real traffic, replayed at their own timing or scaled: each row gives
when a request arrived and how long its prompt and output were. Three formats:

    mooncake  JSONL, one object a row: timestamp (milliseconds), input_length, output_length,
              hash_ids (optional: the prompt's 512-token blocks, equal ids for a shared
              prefix), as in Mooncake's published traces (FAST '25)
    burstgpt  CSV with BurstGPT's columns: Timestamp (seconds), Request tokens, Response
              tokens (rows with no response, failed requests in the trace, or no prompt are
              skipped and counted)
    jsonl     JSONL, one object a row: timestamp_s (seconds), output_length, and either prompt
              (its text) or input_length (tokens)

Reading checks every row, so a bad row stops the workload with one line naming the file, the
row (counted as a user counts them: blank lines aside, a CSV header aside) and the field.
Timestamps may not decrease; the replay's clock starts at the first usable row.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from infbench.workload.sources import WorkloadError, read_jsonl_records

TRACE_FORMATS = ("auto", "mooncake", "burstgpt", "jsonl")
# Mooncake's traces hash prompts in blocks of this many tokens.
MOONCAKE_BLOCK_TOKENS = 512


@dataclass
class TraceRow:
    row: int  # 1-based, as a user counts rows (a CSV header is not a row)
    arrival_s: float  # from the trace's first usable row
    output_tokens: int
    input_tokens: int | None = None  # where the trace gives lengths, not text
    prompt: str | None = None  # where the trace gives the prompt's text
    blocks: tuple[int, ...] = ()  # Mooncake's hash_ids: equal ids, equal prompt blocks


def trace_format(path: Path, fmt: str) -> str:
    """The format to read: as given, or .csv for BurstGPT and, for .jsonl, Mooncake where the
    first row has `timestamp`, the generic layout where it has `timestamp_s`."""
    if not path.is_file():
        raise WorkloadError(f"workload.trace.path: no file at {path}; give the path of your trace")
    if fmt != "auto":
        return fmt
    if path.suffix.lower() == ".csv":
        return "burstgpt"
    if path.suffix.lower() == ".jsonl":
        with open(path, encoding="utf-8") as handle:
            first = next((line for line in handle if line.strip()), "")
        try:
            record = json.loads(first) if first else {}
        except json.JSONDecodeError:
            record = {}
        if isinstance(record, dict) and "timestamp_s" in record:
            return "jsonl"
        return "mooncake"
    raise WorkloadError(
        f"{path}: unknown trace format (extension {path.suffix or '(none)'!r}); name it .jsonl (Mooncake or "
        f"timestamp_s rows) or .csv (BurstGPT), or set workload.trace.format to one of {', '.join(TRACE_FORMATS[1:])}"
    )


def _number(path: Path, row: int, record: dict, field: str, *, whole: bool, least: float) -> float:
    value = record.get(field)
    try:
        number = float(value)
        valid = number >= least and (not whole or number == int(number))
    except (TypeError, ValueError):
        valid = False
    if not valid:
        kind = f"a whole number of at least {least:g}" if whole else f"a number of at least {least:g}"
        raise WorkloadError(f"{path}: row {row}, field {field!r} = {value!r} is not {kind}")
    return int(number) if whole else number


def _mooncake_row(path: Path, number: int, record: dict) -> TraceRow:
    blocks = record.get("hash_ids", [])
    if not isinstance(blocks, list) or not all(isinstance(b, int) for b in blocks):
        raise WorkloadError(f"{path}: row {number}, field 'hash_ids' = {blocks!r} is not a list of whole numbers")
    return TraceRow(
        number,
        _number(path, number, record, "timestamp", whole=False, least=0) / 1000,
        _number(path, number, record, "output_length", whole=True, least=1),
        input_tokens=_number(path, number, record, "input_length", whole=True, least=1),
        blocks=tuple(blocks),
    )


def _jsonl_row(path: Path, number: int, record: dict) -> TraceRow:
    arrival = _number(path, number, record, "timestamp_s", whole=False, least=0)
    output = _number(path, number, record, "output_length", whole=True, least=1)
    prompt = record.get("prompt")
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise WorkloadError(f"{path}: row {number}, field 'prompt' holds no text")
        return TraceRow(number, arrival, output, prompt=prompt)
    if "input_length" not in record:
        raise WorkloadError(f"{path}: row {number} has neither 'prompt' nor 'input_length'; give one of them")
    tokens = _number(path, number, record, "input_length", whole=True, least=1)
    return TraceRow(number, arrival, output, input_tokens=tokens)


def _burstgpt_rows(path: Path) -> tuple[int, list[TraceRow]]:
    with open(path, newline="", encoding="utf-8") as handle:
        records = list(csv.DictReader(handle))
    rows = []
    for number, record in enumerate(records, start=1):
        for field in ("Timestamp", "Request tokens", "Response tokens"):
            if field not in record:
                fields = ", ".join(map(str, record)) or "none"
                raise WorkloadError(
                    f"{path}: row {number} has no field {field!r} (its fields: {fields}); is this a BurstGPT CSV?"
                )
        response = _number(path, number, record, "Response tokens", whole=True, least=0)
        prompt = _number(path, number, record, "Request tokens", whole=True, least=0)
        if not (response and prompt):  # a request that failed in the trace, or had no prompt
            continue
        arrival = _number(path, number, record, "Timestamp", whole=False, least=0)
        rows.append(TraceRow(number, arrival, response, input_tokens=prompt))
    return len(records), rows


def read_trace(path: Path, fmt: str) -> tuple[str, int, list[TraceRow]]:
    """(format read, rows in the file, usable rows with arrivals from the first usable one)."""
    fmt = trace_format(path, fmt)
    if fmt == "burstgpt":
        count, rows = _burstgpt_rows(path)
    else:
        records = read_jsonl_records(path)
        parse = _mooncake_row if fmt == "mooncake" else _jsonl_row
        count, rows = len(records), []
        for number, record in enumerate(records, start=1):
            if not isinstance(record, dict):
                raise WorkloadError(f"{path}: row {number} is a {type(record).__name__}, not an object with fields")
            rows.append(parse(path, number, record))
    if not rows:
        raise WorkloadError(f"{path}: no usable row ({count} rows read); give a trace with at least one request")
    for before, row in zip(rows, rows[1:]):
        if row.arrival_s < before.arrival_s:
            raise WorkloadError(
                f"{path}: row {row.row}, its timestamp is earlier than row {before.row}'s; sort the trace by time"
            )
    start = rows[0].arrival_s
    for row in rows:
        row.arrival_s -= start
    return fmt, count, rows
