"""The config documented once: config/README.md is generated from the schema's descriptions and
defaults, every key config/config.yaml sets is described there, and the test configuration is
an overlay naming only what it changes."""

import copy
import subprocess
import sys

import yaml
from conftest import REPO, TEST_CONFIG, load_default_config, merge_config, tiny_config

from infbench.core.config import fill_defaults, load_schema, validate_config
from infbench.core.config_docs import README_PATH, SCHEMA_PATH, format_value, render

SCHEMA = REPO / SCHEMA_PATH
STALE = "config/README.md is stale: run `make config-docs`"
# Keys whose schema default (what an absent key becomes) is not the value config/config.yaml
# ships; each says so in its description.
SHIPPED_OTHERWISE = {"load.chat_concurrency"}


def resolve(schema: dict, node: dict) -> dict:
    if "$ref" in node:
        target = schema
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return {**resolve(schema, target), **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def schema_keys(schema: dict, node: dict | None = None, path: str = ""):
    """(dotted path, node) of every key the schema describes, list items as `key[]`."""
    node = resolve(schema, schema if node is None else node)
    for key, child in node.get("properties", {}).items():
        child = resolve(schema, child)
        yield f"{path}{key}", child
        yield from schema_keys(schema, child, f"{path}{key}.")
        if isinstance(child.get("items"), dict):
            yield from schema_keys(schema, child["items"], f"{path}{key}[].")


def undescribed(schema: dict) -> list[str]:
    return [path for path, node in schema_keys(schema) if not str(node.get("description", "")).strip()]


def undocumented(config: dict, schema: dict) -> list[str]:
    """Keys of `config` (in mappings and in lists of mappings) with no described schema key."""
    described = {path for path, node in schema_keys(schema) if node.get("description")}
    missing = []

    def walk_keys(value, prefix):
        if isinstance(value, dict):
            for key, item in value.items():
                path = f"{prefix}{key}"
                if path not in described:
                    missing.append(path)
                if isinstance(item, dict):
                    walk_keys(item, f"{path}.")
                elif isinstance(item, list):
                    for element in item:
                        walk_keys(element, f"{path}[].")

    walk_keys(config, "")
    return sorted(set(missing))


def unchanged_keys(overlay: dict, base: dict, prefix: str = "") -> list[str]:
    """Keys of `overlay` that change nothing when merged over `base`: a value equal to the
    base's, or a mapping that names nothing new."""
    found = []
    for key, value in overlay.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            inner = unchanged_keys(value, base[key], f"{path}.")
            found += inner
            if all(f"{path}.{inner_key}" in inner for inner_key in value):
                found.append(path)
        elif key in base and base[key] == value:
            found.append(path)
    return found


def default_config_filled() -> dict:
    schema = load_schema(SCHEMA)
    config = load_default_config()
    fill_defaults(config, schema, schema)
    return config


def run_script(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(REPO / "scripts" / "config_docs.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=60)


def test_readme_is_generated_from_the_schema():
    assert (REPO / README_PATH).read_text() == render(load_schema(SCHEMA)), STALE


def test_check_reports_a_stale_readme(tmp_path):
    assert run_script("--check").returncode == 0
    schema = load_schema(SCHEMA)
    schema["properties"]["seed"]["description"] = "a planted description"
    planted = tmp_path / "config.schema.yaml"
    planted.write_text(yaml.safe_dump(schema, sort_keys=False))
    result = run_script("--check", "--schema", str(planted))
    assert result.returncode == 1
    assert result.stderr.strip() == STALE and not result.stdout
    assert "a planted description" in render(schema) != (REPO / README_PATH).read_text()


def test_render_lists_every_key_by_dotted_path_with_type_range_and_default():
    schema = load_schema(SCHEMA)
    text = render(schema)
    sections = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert sections == [f"`{key}`" for key in schema["properties"]]
    for path, _ in schema_keys(schema):
        assert f"`{path}` (" in text, path
    assert "- `load.slo_ms.ttft` (number, > 0; optional):" in text
    assert "- `engine.block_size` (integer, 1 to 1024; required; default `128`):" in text
    assert "- `models[].id` (string, matching" in text and "required when `source` is `hub`" in text
    assert "`workload.dataset` (object; required when `source` is `dataset`)" in text
    assert "`prefix_caching` (object; optional; default `{enabled: false}`)" in text
    assert "default `[8, 16, 32, 128]`" in text
    assert format_value({"ttft": 1000, "e2el": None}) == "{ttft: 1000, e2el: null}"


def test_every_schema_key_is_described():
    schema = load_schema(SCHEMA)
    assert undescribed(schema) == []
    planted = copy.deepcopy(schema)
    del planted["properties"]["load"]["properties"]["slo_ms"]["properties"]["e2el"]["description"]
    assert undescribed(planted) == ["load.slo_ms.e2el"]


def test_every_key_of_the_default_config_is_documented():
    schema = load_schema(SCHEMA)
    assert undocumented(load_default_config(), schema) == []
    planted = copy.deepcopy(schema)
    del planted["properties"]["models"]["items"]["properties"]["source"]["description"]
    assert undocumented({**load_default_config(), "colour": "red"}, planted) == ["colour", "models[].source"]


def test_schema_defaults_are_what_the_default_config_ships():
    """Every key config/config.yaml sets has a schema default equal to it (a mapping's default
    with the defaults of its keys filled in), so that the generated reference's defaults are the
    shipped ones."""
    schema = load_schema(SCHEMA)
    wrong = []

    def walk(value, node, path):
        node = resolve(schema, node)
        if "default" in node:
            default = copy.deepcopy(node["default"])
            fill_defaults(default, node, schema)
            if value != default and path not in SHIPPED_OTHERWISE:
                wrong.append(f"{path}: config/config.yaml {value!r}, schema default {node['default']!r}")
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, node["properties"][key], f"{path}.{key}".lstrip("."))
        else:
            wrong.append(f"{path}: no schema default")

    walk(default_config_filled(), schema, "")
    assert wrong == []


def test_test_config_is_an_overlay_naming_only_what_it_changes():
    overlay = yaml.safe_load(TEST_CONFIG.read_text())
    assert unchanged_keys(overlay, default_config_filled()) == []
    planted = merge_config(overlay, {"seed": 0, "hardware": {"threads": 2}, "load": {"burstiness": 1.0}})
    found = unchanged_keys(planted, default_config_filled())
    assert sorted(found) == ["hardware", "hardware.threads", "load.burstiness", "seed"]
    assert unchanged_keys({"cost": {}, "capacity": {"tolerance": 0.25}}, default_config_filled()) == [
        "cost",
        "capacity.tolerance",
        "capacity",
    ]


def test_tiny_config_merges_the_overlay_as_snakemake_does(tmp_path):
    from snakemake.utils import update_config

    expected = load_default_config()
    update_config(expected, yaml.safe_load(TEST_CONFIG.read_text()))
    expected["models"][0]["path"] = str(tmp_path)
    config = tiny_config(tmp_path)
    assert config == expected
    # Mappings merge key by key, lists are replaced whole.
    assert config["load"]["slo_ms"] == {"ttft": 250, "tpot": 45} and config["load"]["concurrency"] == [1, 4]
    assert config["prefix_caching"]["shared_prefix"] == {"groups": 2, "tokens": 160, "requests": 8}
    (tmp_path / "config.json").write_text("{}")
    validate_config(config, SCHEMA, REPO)


def test_the_full_overlay_is_valid_and_names_only_what_it_changes():
    """config/full.yaml, merged over the defaults as `--configfile config/config.yaml
    config/full.yaml` merges it, is a valid config that turns on what the default leaves out."""
    from snakemake.utils import update_config

    overlay = yaml.safe_load((REPO / "config" / "full.yaml").read_text())
    assert unchanged_keys(overlay, default_config_filled()) == []
    config = load_default_config()
    update_config(config, overlay)
    validated = validate_config(config, SCHEMA, REPO)
    assert validated["benchmark"]["workload_scenarios"] and validated["load"]["concurrency"] == [1, 8]
