"""JSON artifacts: validated against their schema (shipped with this package), written
atomically, and read back, one model's set at a time."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path

import jsonschema
import yaml
from referencing import Registry, Resource

SCHEMAS = resources.files("infbench") / "schemas"


class ArtifactError(ValueError):
    """An artifact that does not match its schema: a bug, never written to disk."""


def _finite(value):
    """JSON has no NaN or Infinity; a metric that does not exist is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


@cache
def load_schema(name: str) -> dict:
    return yaml.safe_load((SCHEMAS / f"{name}.schema.yaml").read_text())


@cache
def schema_registry() -> Registry:
    """Every artifact schema under its file name, so schemas can `$ref` each other."""
    names = [entry.name for entry in SCHEMAS.iterdir() if entry.name.endswith(".schema.yaml")]
    return Registry().with_resources(
        (name, Resource.from_contents(load_schema(name.removesuffix(".schema.yaml")))) for name in names
    )


def validate(data: dict, schema_name: str) -> None:
    validator = jsonschema.Draft202012Validator(load_schema(schema_name), registry=schema_registry())
    error = next(iter(sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))), None)
    if error is not None:
        where = "/".join(map(str, error.absolute_path)) or "(top level)"
        raise ArtifactError(f"{schema_name} artifact is invalid at {where}: {error.message}")


def write_json(path: str | Path, data: dict, schema_name: str | None = None) -> None:
    """Validate (when a schema is named), then write through a temporary file and rename."""
    data = _finite(data)
    if schema_name:
        validate(data, schema_name)
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def write_jsonl(path: str | Path, rows: list[dict], schema_name: str | None = None) -> None:
    """One JSON object a line; every line validated against the named schema."""
    rows = [_finite(row) for row in rows]
    if schema_name:
        for row in rows:
            validate(row, schema_name)
    write_text_atomic(path, "".join(json.dumps(row) + "\n" for row in rows))


def write_text_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_json(path: str | Path) -> dict:
    with open(path) as handle:
        return json.load(handle)


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_model_artifacts(paths: Mapping[str, str | Path]) -> dict:
    """One model's artifacts, {stage: path} -> {stage: content}: the model folder's
    model.json, a JSONL file as a list of rows, a JSON file as a mapping."""
    loaded = {}
    for stage, path in paths.items():
        path = Path(path)
        if path.is_dir():
            loaded[stage] = read_json(path / "model.json")
        elif path.suffix == ".jsonl":
            loaded[stage] = read_jsonl(path)
        else:
            loaded[stage] = read_json(path)
    return loaded
