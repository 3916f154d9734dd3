"""The `model` stage on the real embedded model: conversion, facts, and loading in both engines."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from infbench.core.artifacts import validate
from infbench.engines.settings import vllm_engine_args
from infbench.model.download import download_model
from infbench.model.folder import ModelError, kv_bytes_per_token, resolve_model, safetensors_parameter_count

PARIS_PROMPT = "The capital of France is"


def test_kv_bytes_per_token_formula():
    # SmolLM: 30 layers, 3 KV heads, head_dim 64 -> REFERENCE section 3 figures.
    assert kv_bytes_per_token(30, 3, 64, "float32") == 46_080
    assert kv_bytes_per_token(30, 3, 64, "bfloat16") == 23_040


def test_embedded_model_facts(embedded_model):
    facts = json.loads((embedded_model / "model.json").read_text())
    validate(facts, "model")
    assert facts["architecture"] == "LlamaForCausalLM"
    assert (facts["num_layers"], facts["num_kv_heads"], facts["head_dim"]) == (30, 3, 64)
    assert facts["kv_bytes_per_token"]["float32"] == 46_080
    assert 134_000_000 < facts["parameters"] < 136_000_000
    assert facts["parameters"] == safetensors_parameter_count(embedded_model)
    assert facts["source"]["kind"] == "embedded" and len(facts["source"]["gguf_sha256"]) == 64
    assert set(facts["files"]) >= {"model.safetensors", "config.json", "tokenizer.json"}
    assert "quantization_config" not in json.loads((embedded_model / "config.json").read_text())


def test_transformers_continues_with_paris(embedded_model):
    tokenizer = AutoTokenizer.from_pretrained(embedded_model)
    model = AutoModelForCausalLM.from_pretrained(embedded_model, dtype=torch.float32)
    inputs = tokenizer(PARIS_PROMPT, return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    text = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :])
    assert text.startswith(" Paris"), text


@pytest.mark.slow
def test_vllm_continues_with_paris(embedded_model, default_config):
    from vllm import LLM, SamplingParams

    engine = dict(default_config["engine"], kv_cache_gib=0.25)
    llm = LLM(**vllm_engine_args(embedded_model, "float32", engine, seed=0, device="cpu"))
    try:
        output = llm.generate([PARIS_PROMPT], SamplingParams(temperature=0, max_tokens=4))
        assert output[0].outputs[0].text.startswith(" Paris"), output[0].outputs[0].text
    finally:
        del llm


def test_local_folder_is_linked_not_copied(embedded_model, tmp_path):
    facts = resolve_model({"name": "mine", "source": "local", "path": str(embedded_model)}, tmp_path / "mine", None)
    assert (tmp_path / "mine" / "model.safetensors").is_symlink()
    assert facts.source == {"kind": "local", "path": str(embedded_model.resolve())}
    assert facts.num_layers == 30


def test_local_folder_without_config_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model({"name": "x", "source": "local", "path": str(tmp_path / "empty")}, tmp_path / "x", None)
    assert not (tmp_path / "x").exists(), "a failed resolve must not leave a half-written folder"


def test_hub_without_network_fails_fast_with_the_fix(tmp_path, monkeypatch):
    import time

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        download_model({"name": "smollm", "source": "hub", "id": "HuggingFaceTB/SmolLM-135M"}, tmp_path / "dl")
    assert time.monotonic() - started < 30
    assert "source: local" in str(caught.value)
    assert not any((tmp_path / "dl").iterdir())


def test_tiny_model_keeps_tokenizer_and_shapes(tiny_model, embedded_model):
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["num_hidden_layers"] == 2
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    reference = AutoTokenizer.from_pretrained(embedded_model)
    assert tokenizer(PARIS_PROMPT)["input_ids"] == reference(PARIS_PROMPT)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert len(model.model.layers) == 2
