"""Configuration checks: the JSON schema first, then what a schema cannot say.

Every problem becomes one ConfigError line that names the key, the bad value and what is
allowed, so a bad config stops the workflow before any job runs.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml


class ConfigError(ValueError):
    """A configuration problem, worded for the user who has to fix it."""


def _key_path(path) -> str:
    parts = []
    for part in path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "".join(parts).lstrip(".") or "(top level)"


def _subschema(schema: dict, path) -> dict:
    """The schema node that describes the value at `path` (follows properties/items/$ref)."""
    node = schema
    for part in path:
        if "$ref" in node:
            node = _resolve_ref(schema, node["$ref"])
        if isinstance(part, int):
            node = node.get("items", {})
        else:
            node = node.get("properties", {}).get(part, {})
    if "$ref" in node:
        node = _resolve_ref(schema, node["$ref"])
    return node


def _resolve_ref(schema: dict, ref: str) -> dict:
    node = schema
    for part in ref.lstrip("#/").split("/"):
        node = node[part]
    return node


def _describe_allowed(node: dict) -> str:
    """What a key allows, short: its values or bounds and its description's first sentence where
    that is short (the whole description is in config/README.md)."""
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(map(str, node["enum"])))
    else:
        bounds = [str(node["type"])] if isinstance(node.get("type"), str) and node["type"] != "object" else []
        for word, key in ((">=", "minimum"), (">", "exclusiveMinimum"), ("<=", "maximum")):
            if key in node:
                bounds.append(f"{word} {node[key]}")
        parts += [" ".join(bounds)] if bounds else []
    sentence = node.get("description", "").strip().split(". ")[0].rstrip(".")
    if sentence and (len(sentence) <= 160 or not parts):
        parts.append(sentence if len(sentence) <= 160 else sentence[:157] + "...")
    if not parts and "properties" in node:
        parts.append("keys " + ", ".join(node["properties"]))
    return "; ".join(parts) or "see config/README.md"


def _schema_message(error: jsonschema.ValidationError, schema: dict) -> str:
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        node = _subschema(schema, path)
        unknown = sorted(set(error.instance) - set(node.get("properties", {})))
        where = _key_path(path)
        return (
            f"unknown key {', '.join(map(repr, unknown))} in {where}; "
            f"allowed keys: {', '.join(node.get('properties', {}))}"
        )
    if error.validator == "required":
        return f"{_key_path(path)}: {error.message}"
    node = _subschema(schema, path)
    return (
        f"{_key_path(path)} = {error.instance!r} is not allowed ({error.message}); allowed: {_describe_allowed(node)}"
    )


def load_schema(path: str | Path) -> dict:
    with open(path) as handle:
        return yaml.safe_load(handle)


def check_schema(config: dict, schema: dict) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if errors:
        # The deepest error is the most specific one; `if/then` failures come with a
        # nested `required` error that names the missing key.
        first = errors[0]
        raise ConfigError(
            f"config error: {_schema_message(first, schema)}"
            + (f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else "")
        )


def fill_defaults(value: Any, node: dict, schema: dict) -> None:
    """Set the schema's `default` of every absent optional key, in every mapping present, so
    that each stage reads one complete config (and a key written out equals a key left out)."""
    if "$ref" in node:
        node = _resolve_ref(schema, node["$ref"])
    if isinstance(value, dict):
        for key, child in node.get("properties", {}).items():
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
            if key in value:
                fill_defaults(value[key], child, schema)
    elif isinstance(value, list) and "items" in node:
        for item in value:
            fill_defaults(item, node["items"], schema)


def check_semantics(config: dict, base_dir: Path) -> None:
    names = [model["name"] for model in config["models"]]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"config error: models: name {duplicates[0]!r} is used twice; give every model its own name")
    for index, model in enumerate(config["models"]):
        if model["source"] == "local":
            folder = resolve_path(model["path"], base_dir)
            if not (folder / "config.json").is_file():
                raise ConfigError(
                    f"config error: models[{index}].path = {model['path']!r}: no model folder there "
                    f"(looked for {folder / 'config.json'}); give a folder with config.json, tokenizer and weights"
                )
    engine = config["engine"]
    if config["hardware"]["device"] == "cpu" and engine["block_size"] % 32:
        raise ConfigError(
            f"config error: engine.block_size = {engine['block_size']} is not allowed on device cpu; "
            "allowed: a multiple of 32 (vLLM's CPU attention needs it; 128 is its default)"
        )
    synthetic = config["workload"]["synthetic"]
    for key in ("prompt_tokens", "output_tokens"):
        dist = synthetic.get(key)
        if dist and dist["min"] > dist["max"]:
            raise ConfigError(
                f"config error: workload.synthetic.{key}.min = {dist['min']} is larger than max = {dist['max']}; "
                "allowed: min <= max"
            )
    if config["server"]["external"] and len(config["models"]) != 1:
        raise ConfigError(
            f"config error: server.external measures one endpoint, but models lists {len(config['models'])}; "
            "allowed: one model, the one whose tokenizer matches the endpoint's model"
        )
    variants = config["variants"]
    if variants["enabled"]:
        names = [variant["name"] for variant in variants["list"]]
        if len(names) < 2:
            raise ConfigError(
                f"config error: variants.list has {len(names)} variant; a comparison needs a baseline and at least "
                "one other: add one (e.g. {name: fewer_seqs, engine: {max_num_seqs: 4}}) or set variants.enabled: false"
            )
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ConfigError(
                f"config error: variants.list names {repeated[0]!r} twice; give each variant its own name"
            )
        for variant in variants["list"]:
            changes = [
                key for key in ("engine", "flags", "env", "python") if variant.get("endpoint") and key in variant
            ]
            if variant.get("endpoint") and len(config["models"]) > 1:
                raise ConfigError(
                    f"config error: variants.list's {variant['name']!r} is an endpoint, which serves one model, but "
                    f"models lists {len(config['models'])}; list that one model, or drop the endpoint variant"
                )
            if changes:
                raise ConfigError(
                    f"config error: variants.list's {variant['name']!r} names an endpoint and {', '.join(changes)}; an "
                    "endpoint runs as it was started elsewhere: drop them, or drop the endpoint to start a server here"
                )
        if variants["rounds"] % len(names):
            fit = -(-variants["rounds"] // len(names)) * len(names)
            raise ConfigError(
                f"config error: variants.rounds is {variants['rounds']}, not a multiple of the {len(names)} variants, "
                f"so they would not hold each place in the order equally often; set variants.rounds: {fit}"
            )
    workload = config["workload"]
    if workload["source"] == "dataset":
        path = resolve_path(workload["dataset"]["path"], base_dir)
        if not path.exists():
            raise ConfigError(
                f"config error: workload.dataset.path = {workload['dataset']['path']!r}: no file or folder there "
                f"(looked for {path}); give the path of your prompt file or dataset folder"
            )
    sessions = config["sessions"]
    if sessions["rate"] and not sessions["capacity"]:
        raise ConfigError(
            "config error: sessions.rate searches the rate sessions start at from the users capacity, which "
            "sessions.capacity: false leaves out; set sessions.capacity: true, or sessions.rate: false"
        )
    turns = sessions["turns"]
    if isinstance(turns, dict) and turns["min"] > turns["max"]:
        raise ConfigError(
            f"config error: sessions.turns = {turns}: min is above max; give min <= max, or one number of turns"
        )
    if sessions["capacity"] or config["load"]["users"] or config["load"]["session_ramp"]:
        if sessions["source"] != "synthetic" and not resolve_path(sessions["source"], base_dir).is_file():
            raise ConfigError(
                f"config error: sessions.source = {sessions['source']!r}: no file there (looked for "
                f"{resolve_path(sessions['source'], base_dir)}); give a ShareGPT .json or .jsonl file, or synthetic"
            )
    paging = config["paging_live"]
    if paging["enabled"]:
        if config["hardware"]["device"] == "cpu" and paging["max_model_len"] % 32:
            raise ConfigError(
                f"config error: paging_live.max_model_len = {paging['max_model_len']} is also the contiguous "
                "server's block size, which vLLM on CPU needs to be a multiple of 32; allowed: e.g. 512 (the study's)"
            )
        if paging["max_model_len"] < 256 + paging["output_tokens"]:
            raise ConfigError(
                f"config error: paging_live.max_model_len = {paging['max_model_len']} does not hold the study's "
                f"256-token prompt and {paging['output_tokens']} output tokens; allowed: at least "
                f"{256 + paging['output_tokens']}"
            )
        if paging["pool_tokens"] < 2 * paging["max_model_len"]:
            raise ConfigError(
                f"config error: paging_live.pool_tokens = {paging['pool_tokens']} holds fewer than two "
                f"{paging['max_model_len']}-token blocks (vLLM keeps one as its null block); allowed: at least "
                f"{2 * paging['max_model_len']}"
            )
    capacity = config["capacity"]
    if capacity["start_concurrency"] > capacity["max_concurrency"]:
        raise ConfigError(
            f"config error: capacity.start_concurrency = {capacity['start_concurrency']} is above "
            f"capacity.max_concurrency = {capacity['max_concurrency']}; allowed: start <= max (set "
            "capacity.start_concurrency, whose default is 16)"
        )
    longest_study = max(config["benchmark"]["study_max_new_tokens"])
    if longest_study + 32 > engine["max_model_len"]:
        raise ConfigError(
            f"config error: benchmark.study_max_new_tokens = {longest_study} does not fit in "
            f"engine.max_model_len = {engine['max_model_len']} with the study's prompt; "
            f"allowed: at most {engine['max_model_len'] - 32}"
        )


def resolve_path(path: str, base_dir: Path) -> Path:
    expanded = Path(os.path.expandvars(os.path.expanduser(path)))
    return expanded if expanded.is_absolute() else (base_dir / expanded).resolve()


def validate_config(config: Any, schema_path: str | Path, base_dir: Path) -> dict:
    """Check a loaded config against the workflow's schema (workflow/schemas/config.schema.yaml)
    and what a schema cannot say; raise ConfigError with one clear line on the first problem."""
    if not isinstance(config, dict) or not config:
        raise ConfigError("config error: the config is empty or not a mapping; start from config/config.yaml")
    schema = load_schema(schema_path)
    check_schema(config, schema)
    fill_defaults(config, schema, schema)
    check_semantics(config, base_dir)
    return config


def canonical(value):
    """The same value with every mapping's keys in sorted order (lists keep their order)."""
    if isinstance(value, dict):
        return {key: canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value
