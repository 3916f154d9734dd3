"""config/README.md from the config schema (workflow/schemas/config.schema.yaml).

The schema is the one place where each key's description and default are written; `render`
turns it into the Markdown reference, one section per top-level key and one entry per key
below it, named by its dotted path (`load.slo_ms.ttft`; list items as `models[].name`).
`scripts/config_docs.py` (`make config-docs`) writes the file, and a test fails while it is stale.
"""

from __future__ import annotations

from collections.abc import Iterator

SCHEMA_PATH = "workflow/schemas/config.schema.yaml"
README_PATH = "config/README.md"

INTRO = f"""# Configuration

<!-- Generated from {SCHEMA_PATH} by `make config-docs`: edit the schema, not this file. -->

This reference is generated from `{SCHEMA_PATH}` by `make config-docs`
(`python scripts/config_docs.py`): every key's description and default are written in the
schema's `description` and `default` fields, so edit them there and regenerate; a test fails
while this file is stale.

`config/config.yaml` is checked against the schema before any job runs; a bad value stops the
run with one line naming the key, the value and what is allowed. Override single keys with
`snakemake --cores 8 --config seed=1`, or use another file with `--configfile my.yaml`:
Snakemake merges it over `config/config.yaml` (mappings key by key, lists replaced), so it
needs only the keys it changes, as `.test/config/config.yaml` does.

Each entry reads `key` (type and allowed values; required or optional; default): what it
does. An optional key left out takes its default before any rule sees the config. A required
key must be in the config Snakemake reads: `config/config.yaml` gives each one its default,
which a `--configfile` of your own that leaves the key out keeps.
"""

_PLURAL = {"integer": "integers", "number": "numbers", "string": "strings", "boolean": "booleans", "object": "objects"}


def render(schema: dict) -> str:
    """The Markdown reference of a config schema: INTRO, then a section per top-level key."""
    parts = [INTRO]
    root_required = schema.get("required", [])
    for key, node in schema.get("properties", {}).items():
        entries = list(_entries(schema, node, key, _requirement(key, root_required, {})))
        heading = f"## `{key}`"
        own, children = entries[0], entries[1:]
        section = f"{heading}\n\n{own}\n"
        if children:
            section += "\n" + "\n".join(f"- {entry}" for entry in children) + "\n"
        parts.append(section)
    return "\n".join(parts)


def _entries(schema: dict, node: dict, path: str, requirement: str) -> Iterator[str]:
    """The entry of the key at `path`, then those of the keys below it: an object's
    properties as `path.key`, a list's items' properties as `path[].key`."""
    node = _resolve(schema, node)
    yield _entry(schema, node, path, requirement)
    items = node.get("items")
    for prefix, container in ((path, node), (f"{path}[]", _resolve(schema, items) if isinstance(items, dict) else {})):
        conditions = _conditions(container)
        required = container.get("required", [])
        for key, child in container.get("properties", {}).items():
            yield from _entries(schema, child, f"{prefix}.{key}", _requirement(key, required, conditions))


def _entry(schema: dict, node: dict, path: str, requirement: str) -> str:
    facts = [_kind(schema, node), requirement]
    if "default" in node:
        facts.append(f"default `{format_value(node['default'])}`")
    line = f"`{path}` (" + "; ".join(facts) + ")"
    description = node.get("description", "").strip()
    return f"{line}:\n  {description}" if description else line


def _resolve(schema: dict, node: dict) -> dict:
    """A node with its `$ref` followed; the node's own keys (description, default) win."""
    if "$ref" not in node:
        return node
    target = schema
    for part in node["$ref"].lstrip("#/").split("/"):
        target = target[part]
    resolved = dict(_resolve(schema, target))
    resolved.update({key: value for key, value in node.items() if key != "$ref"})
    return resolved


def _conditions(node: dict) -> dict[str, list[str]]:
    """{key: ["`source` is `hub`", ...]}: when an `if`/`then` of `node` makes a key required."""
    conditions: dict[str, list[str]] = {}
    for rule in [node, *node.get("allOf", [])]:
        if "if" not in rule or "then" not in rule:
            continue
        tests = [
            f"`{key}` is `{format_value(test['const'])}`"
            for key, test in rule["if"].get("properties", {}).items()
            if "const" in test
        ]
        for key in rule["then"].get("required", []):
            conditions.setdefault(key, []).append(" and ".join(tests))
    return conditions


def _requirement(key: str, required: list[str], conditions: dict[str, list[str]]) -> str:
    if key in required:
        return "required"
    if key in conditions:
        return "required when " + " or ".join(conditions[key])
    return "optional"


def _kind(schema: dict, node: dict) -> str:
    """The type and the allowed values or range, e.g. `integer, 1 to 1024`."""
    if "enum" in node:
        return "one of " + ", ".join(f"`{format_value(value)}`" for value in node["enum"])
    if "const" in node:
        return f"`{format_value(node['const'])}`"
    if "oneOf" in node:
        return " or ".join(_kind(schema, _resolve(schema, choice)) for choice in node["oneOf"])
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    names = [name for name in types if name != "null"] + (["null"] if "null" in types else [])
    if "array" in names:
        items = _resolve(schema, node.get("items", {}))
        item_types = items.get("type", "value")
        item_name = _PLURAL.get(item_types, item_types) if isinstance(item_types, str) else "values"
        item_range = _bounds(items)
        text = f"list of {item_name}" + (f" {item_range}" if item_range else "")
        if node.get("minItems") == 1:
            text = "non-empty " + text
        elif "minItems" in node:
            text += f", at least {node['minItems']}"
        names[names.index("array")] = text
    text = " or ".join(names) or "any value"
    limits = [_bounds(node)]
    if node.get("minLength") == 1:
        limits.append("non-empty")
    elif "minLength" in node:
        limits.append(f"at least {node['minLength']} characters")
    if "pattern" in node:
        limits.append(f"matching `{node['pattern']}`")
    return ", ".join([text, *filter(None, limits)])


def _bounds(node: dict) -> str:
    low = node.get("minimum")
    high = node.get("maximum")
    if low is not None and high is not None:
        return f"{format_value(low)} to {format_value(high)}"
    words = []
    if "exclusiveMinimum" in node:
        words.append(f"> {format_value(node['exclusiveMinimum'])}")
    if low is not None:
        words.append(f"≥ {format_value(low)}")
    if high is not None:
        words.append(f"≤ {format_value(high)}")
    return ", ".join(words)


def format_value(value) -> str:
    """A value as it is written in config/config.yaml (YAML flow style): null, true, [1, 4],
    {ttft: 1000, tpot: 100}."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(map(format_value, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {format_value(item)}" for key, item in value.items()) + "}"
    return str(value)
