"""The config schema and semantic checks: accepted configs, and refusals that name the key,
the bad value and what is allowed."""

import pytest
from conftest import REPO, load_default_config

from infbench.core.config import ConfigError, validate_config
from infbench.core.hardware import resolve_dtype

CONFIG_SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def refuse(config) -> str:
    with pytest.raises(ConfigError) as caught:
        validate_config(config, CONFIG_SCHEMA, REPO)
    return str(caught.value)


def test_default_config_is_valid():
    validate_config(load_default_config(), CONFIG_SCHEMA, REPO)


def test_hub_and_local_models_are_accepted(tmp_path, default_config):
    (tmp_path / "config.json").write_text("{}")
    default_config["models"] = [
        {"name": "smollm-135m", "source": "hub", "id": "HuggingFaceTB/SmolLM-135M"},
        {"name": "mine", "source": "local", "path": str(tmp_path)},
    ]
    validate_config(default_config, CONFIG_SCHEMA, REPO)


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda c: c["engine"].update(colour="red"), ["unknown key 'colour'", "engine", "kv_cache_gib"]),
        (lambda c: c.update(extra=1), ["unknown key 'extra'", "(top level)"]),
        (lambda c: c["hardware"].update(threads="two"), ["hardware.threads", "'two'", "integer"]),
        (lambda c: c["hardware"].update(threads=0), ["hardware.threads", "0", "minimum"]),
        (lambda c: c["hardware"].update(device="tpu"), ["hardware.device", "'tpu'", "cpu, cuda"]),
        (lambda c: c["hardware"].update(dtype="fp8"), ["hardware.dtype", "'fp8'", "float32"]),
        (lambda c: c["benchmark"].update(repeats=1), ["benchmark.repeats", "1", "at least 2"]),
        (lambda c: c["engine"].update(kv_cache_gib=-1), ["engine.kv_cache_gib", "-1", "GiB"]),
        (
            lambda c: c["workload"]["synthetic"].update(preset="huge"),
            ["workload.synthetic.preset", "'huge'", "sharegpt"],
        ),
        (lambda c: c.update(models=[]), ["models", "[]", "non-empty list"]),
        (
            lambda c: c.update(models=[{"name": "a b", "source": "embedded"}]),
            ["models[0].name", "'a b'", "letters, digits"],
        ),
        (lambda c: c.update(models=[{"name": "x", "source": "hub"}]), ["models[0]", "'id' is a required property"]),
        (lambda c: c.update(models=[{"name": "x", "source": "embedded"}] * 2), ["name 'x' is used twice"]),
        (
            lambda c: c.update(models=[{"name": "x", "source": "local", "path": "/no/such/folder"}]),
            ["models[0].path", "/no/such/folder", "config.json"],
        ),
        (lambda c: c["engine"].update(block_size=48), ["engine.block_size = 48", "multiple of 32"]),
        (lambda c: c["engine"].update(max_model_len=64), ["study_max_new_tokens", "max_model_len = 64"]),
        (lambda c: c["workload"]["synthetic"].update(preset="custom"), ["workload.synthetic", "required property"]),
        (  # load.users reads the sessions' file as the users search does
            lambda c: (c["load"].update(users=[4]), c["sessions"].update(source="/no/such.jsonl")),
            ["sessions.source = '/no/such.jsonl'", "no file there", "ShareGPT"],
        ),
        (  # and so does load.session_ramp
            lambda c: (
                c["load"].update(session_ramp={"start_rate": 1.0, "end_rate": 2.0}),
                c["sessions"].update(source="/no/such.jsonl"),
            ),
            ["sessions.source = '/no/such.jsonl'", "no file there", "ShareGPT"],
        ),
    ],
)
def test_bad_config_is_refused_with_key_value_and_allowed(default_config, edit, expected):
    edit(default_config)
    message = refuse(default_config)
    assert message.startswith("config error:")
    for fragment in expected:
        assert fragment in message, f"{fragment!r} missing from: {message}"


def test_empty_config_is_refused():
    assert "empty" in refuse({})


def test_dtype_auto(monkeypatch):
    import infbench.core.hardware as hardware_module

    assert resolve_dtype("float16", "cpu") == "float16"
    assert resolve_dtype("auto", "cuda") == "bfloat16"
    monkeypatch.setattr(hardware_module, "native_bf16_cpu", lambda: False)
    assert resolve_dtype("auto", "cpu") == "float32"
    monkeypatch.setattr(hardware_module, "native_bf16_cpu", lambda: True)
    assert resolve_dtype("auto", "cpu") == "bfloat16"


def test_native_bf16_reads_cpu_flags(tmp_path):
    from infbench.core.hardware import native_bf16_cpu

    (tmp_path / "avx2").write_text("flags\t\t: fpu avx avx2 fma\n")
    (tmp_path / "bf16").write_text("flags\t\t: fpu avx avx2 avx512f avx512_bf16\n")
    assert not native_bf16_cpu(str(tmp_path / "avx2"))
    assert native_bf16_cpu(str(tmp_path / "bf16"))
    assert not native_bf16_cpu(str(tmp_path / "missing"))


def test_canonical_sorts_keys_at_every_depth():
    from infbench.core.config import canonical

    value = {"b": 1, "a": {"d": [{"z": 1, "y": 2}], "c": 0}}
    result = canonical(value)
    assert list(result) == ["a", "b"] and list(result["a"]) == ["c", "d"] and list(result["a"]["d"][0]) == ["y", "z"]
    assert result == value
