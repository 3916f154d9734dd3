"""Prompts from the user's own data: a JSONL, JSON, CSV or Parquet file with a prompt column,
a ShareGPT-format conversation file, or a Hugging Face dataset folder (`save_to_disk`).

Reading checks every row, so a bad row stops the workload with one line naming the file,
the row and the field, before anything is tokenized or sampled.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from infbench.core.errors import UserError

FORMATS = ("auto", "jsonl", "json", "csv", "parquet", "sharegpt", "hf")
EXTENSIONS = {".jsonl": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


class WorkloadError(UserError):
    pass


@dataclass
class SourceRow:
    row: int  # 1-based position in the source, as a user counts rows (a CSV header is not a row)
    prompt: str
    output_tokens: int | None  # the file's own output length, None where it gives none
    reply: str | None = None  # ShareGPT: the reply, whose token count is the output length


def checksum(path: Path) -> str:
    """SHA-256 of a file, or of a folder's files (relative names and contents, in name order)."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        if file != path:
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def resolve_format(path: Path, fmt: str) -> str:
    """The format to read: as given, or from the extension (a folder is a Hugging Face dataset;
    a .json list of {"conversations": ...} objects is ShareGPT)."""
    if not path.exists():
        raise WorkloadError(f"workload.dataset.path: no file or folder at {path}; give the path of your prompt file")
    if fmt != "auto":
        return fmt
    if path.is_dir():
        return "hf"
    detected = EXTENSIONS.get(path.suffix.lower())
    if detected is None:
        raise WorkloadError(
            f"{path}: unknown format (extension {path.suffix or '(none)'!r}); name it .jsonl, .json, .csv or "
            f".parquet, or set workload.dataset.format to one of {', '.join(FORMATS[1:])}"
        )
    return detected


def read_jsonl_records(path: Path) -> list:
    """One JSON value a non-blank line; a row is counted as a user counts them, blank lines aside."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise WorkloadError(
                    f"{path}: row {number} is not JSON ({error.msg}); give one JSON object per line"
                ) from None
    return records


def _records_json(path: Path) -> list:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise WorkloadError(f"{path}: not JSON ({error.msg} at line {error.lineno}); give a list of objects") from None
    if not isinstance(data, list):
        raise WorkloadError(f"{path}: holds a JSON {type(data).__name__}, not a list of objects; give a list")
    return data


def _records_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _records_parquet(path: Path) -> list[dict]:
    import pandas as pd

    try:
        return pd.read_parquet(path).to_dict(orient="records")
    except Exception as error:  # pyarrow raises several types for a damaged file
        raise WorkloadError(f"{path}: not a readable Parquet file ({error}); check the file or its format") from None


def _records_hf(path: Path, split: str) -> list[dict]:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError as error:
        raise WorkloadError(
            f"{path}: not a Hugging Face dataset folder ({error}); give a folder written by Dataset.save_to_disk"
        ) from None
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise WorkloadError(
                f"{path}: no split {split!r} (splits: {', '.join(loaded)}); set workload.dataset.split to one of them"
            )
        loaded = loaded[split]
    return [dict(row) for row in loaded]


def is_sharegpt(records: list) -> bool:
    return bool(records) and isinstance(records[0], dict) and "conversations" in records[0]


def _sharegpt_rows(path: Path, records: list) -> list[SourceRow]:
    """ShareGPT as vLLM's benchmark reads it: the first turn is the prompt, the second the reply
    whose token count is the output length; conversations of fewer than two turns are skipped
    (left out of the rows, counted by the caller as rows read minus rows returned)."""
    rows = []
    for number, record in enumerate(records, start=1):
        turns = record.get("conversations") if isinstance(record, dict) else None
        if not isinstance(turns, list):
            raise WorkloadError(f"{path}: row {number} has no 'conversations' list; is this a ShareGPT file?")
        if len(turns) < 2:
            continue
        for index, turn in enumerate(turns[:2]):
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise WorkloadError(f"{path}: row {number}, conversations[{index}] has no text 'value'")
        if turns[0]["value"].strip():
            rows.append(SourceRow(number, turns[0]["value"], None, reply=turns[1]["value"]))
    return rows


def _output_tokens(path: Path, number: int, record: dict, field: str) -> int:
    value = record.get(field)
    try:
        tokens = int(value)
        valid = tokens >= 1 and float(value) == tokens
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise WorkloadError(
            f"{path}: row {number}, field {field!r} = {value!r} is not a positive whole number of output tokens"
        )
    return tokens


def _prompt_rows(path: Path, records: list, prompt_field: str, output_tokens_field: str | None) -> list[SourceRow]:
    rows = []
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict):
            raise WorkloadError(f"{path}: row {number} is a {type(record).__name__}, not an object with fields")
        prompt = record.get(prompt_field)
        if not isinstance(prompt, str) or not prompt.strip():
            fields = ", ".join(map(str, record)) or "none"
            raise WorkloadError(
                f"{path}: row {number} has no text in field {prompt_field!r} (its fields: {fields}); "
                "set workload.dataset.prompt_field to the field that holds the prompt"
            )
        given = _output_tokens(path, number, record, output_tokens_field) if output_tokens_field else None
        rows.append(SourceRow(number, prompt, given))
    return rows


def read_rows(path: Path, dataset: dict) -> tuple[str, int, list[SourceRow]]:
    """(format read, rows in the source, usable rows) of a dataset source."""
    fmt = resolve_format(path, dataset["format"])
    reader = {
        "jsonl": read_jsonl_records,
        "json": _records_json,
        "sharegpt": _records_json,
        "csv": _records_csv,
        "parquet": _records_parquet,
        "hf": lambda p: _records_hf(p, dataset["split"]),
    }[fmt]
    records = reader(path)
    if fmt == "sharegpt" or (fmt == "json" and is_sharegpt(records)):
        return "sharegpt", len(records), _sharegpt_rows(path, records)
    return fmt, len(records), _prompt_rows(path, records, dataset["prompt_field"], dataset.get("output_tokens_field"))
