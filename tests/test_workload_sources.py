"""The user's own prompts: every format read to the same rows, bad input stopped with one line
naming the file, the row and the field, and seeded sampling that fits the engine."""

import json
import random
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO

from infbench.core.config import ConfigError, validate_config
from infbench.workload.sources import WorkloadError, checksum, read_rows

PROMPTS = ["What is a KV cache?", "Name three rivers in Europe.", "Explain paging, briefly."]
OUTPUTS = [12, 7, 30]
DATASET = {"format": "auto", "prompt_field": "prompt", "output_tokens_field": None, "split": "train"}


def write_formats(folder: Path) -> dict[str, Path]:
    """The same three prompts (with output lengths) in every tabular format this reads."""
    frame = pd.DataFrame({"prompt": PROMPTS, "output_tokens": OUTPUTS, "source": ["a", "b", "c"]})
    paths = {name: folder / f"prompts.{name}" for name in ("jsonl", "json", "csv", "parquet")}
    frame.to_json(paths["jsonl"], orient="records", lines=True)
    frame.to_json(paths["json"], orient="records")
    frame.to_csv(paths["csv"], index=False)
    frame.to_parquet(paths["parquet"])
    import datasets

    paths["hf"] = folder / "prompts-hf"
    datasets.DatasetDict({"train": datasets.Dataset.from_pandas(frame)}).save_to_disk(str(paths["hf"]))
    return paths


def sharegpt(conversations: list[list[str]]) -> list[dict]:
    roles = ["human", "gpt"]
    return [
        {"id": f"c{i}", "conversations": [{"from": roles[j % 2], "value": text} for j, text in enumerate(turns)]}
        for i, turns in enumerate(conversations)
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet", "hf"])
def test_every_format_reads_the_same_rows(tmp_path, fmt):
    path = write_formats(tmp_path)[fmt]
    read_as, count, rows = read_rows(path, {**DATASET, "output_tokens_field": "output_tokens"})
    assert read_as == fmt and count == 3
    expected = [(number, prompt, tokens) for number, prompt, tokens in zip((1, 2, 3), PROMPTS, OUTPUTS)]
    assert [(r.row, r.prompt, r.output_tokens) for r in rows] == expected


def test_sharegpt_is_detected_and_read_as_vllm_reads_it(tmp_path):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(sharegpt([["Hello?", "Hi, how can I help?"], ["alone"], ["Why?", "Because."]])))
    read_as, count, rows = read_rows(path, DATASET)
    assert read_as == "sharegpt" and count == 3
    # A conversation without a reply is skipped (vLLM's sampling needs both turns); rows keep their numbers.
    assert [(r.row, r.prompt, r.reply) for r in rows] == [(1, "Hello?", "Hi, how can I help?"), (3, "Why?", "Because.")]


def test_a_prompt_column_of_another_name(tmp_path):
    path = tmp_path / "p.csv"
    pd.DataFrame({"question": PROMPTS}).to_csv(path, index=False)
    assert [r.prompt for r in read_rows(path, {**DATASET, "prompt_field": "question"})[2]] == PROMPTS


@pytest.mark.parametrize(
    ("content", "name", "dataset", "message"),
    [
        (None, "missing.jsonl", {}, "no file or folder at"),
        ("prompt\nhi\n", "prompts.txt", {}, "unknown format (extension '.txt')"),
        ('{"prompt": "a"}\n{"text": "b"}\n', "p.jsonl", {}, "row 2 has no text in field 'prompt' (its fields: text)"),
        ('{"prompt": "a"}\nnot json\n', "p.jsonl", {}, "row 2 is not JSON"),
        ('{"prompt": "a"}', "p.json", {}, "holds a JSON dict, not a list"),
        (
            '[{"prompt": "a", "n": 5}, {"prompt": "b", "n": "many"}]',
            "p.json",
            {"output_tokens_field": "n"},
            "row 2, field 'n' = 'many' is not a positive whole number",
        ),
        ('[{"prompt": "a", "n": 0}]', "p.json", {"output_tokens_field": "n"}, "row 1, field 'n' = 0"),
        ('[{"conversations": "x"}]', "p.json", {"format": "sharegpt"}, "row 1 has no 'conversations' list"),
    ],
)
def test_bad_input_names_the_file_the_row_and_the_field(tmp_path, content, name, dataset, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(WorkloadError) as error:
        read_rows(path, {**DATASET, **dataset})
    assert message in str(error.value) and str(path) in str(error.value)


def test_a_missing_split_lists_the_splits_there_are(tmp_path):
    path = write_formats(tmp_path)["hf"]
    with pytest.raises(WorkloadError, match=r"no split 'test' \(splits: train\)"):
        read_rows(path, {**DATASET, "split": "test"})


def test_the_checksum_follows_the_content_of_a_file_or_a_folder(tmp_path):
    paths = write_formats(tmp_path)
    before = checksum(paths["jsonl"]), checksum(paths["hf"])
    assert checksum(paths["jsonl"]) == before[0]
    paths["jsonl"].write_text(paths["jsonl"].read_text().replace("rivers", "lakes"))
    (paths["hf"] / "extra.txt").write_text("x")
    assert checksum(paths["jsonl"]) != before[0] and checksum(paths["hf"]) != before[1]


def default_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def validated(config: dict) -> dict:
    return validate_config(config, REPO / "workflow" / "schemas" / "config.schema.yaml", REPO)


def test_config_fills_the_dataset_defaults_and_checks_the_path(tmp_path):
    config = default_config()
    assert validated(config)["workload"]["api"] == "completions"  # absent keys take the schema's defaults
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n')
    config["workload"].update(source="dataset", dataset={"path": str(path), "num_requests": 5})
    assert validated(config)["workload"]["dataset"]["format"] == "auto"
    config["workload"]["dataset"]["path"] = str(tmp_path / "gone.jsonl")
    with pytest.raises(ConfigError, match="workload.dataset.path = .*gone.jsonl.*no file or folder there"):
        validated(config)
    config["workload"].pop("dataset")
    with pytest.raises(ConfigError, match="'dataset' is a required property"):
        validated(config)


def test_an_external_endpoint_needs_one_model_and_a_variable_name_not_a_key():
    config = default_config()
    config["server"]["external"] = {"base_url": "http://node:8000", "model": "m", "api_key_env": "sk-abc123!"}
    with pytest.raises(ConfigError, match="api_key_env"):
        validated(config)
    config["server"]["external"]["api_key_env"] = "MY_KEY"
    assert validated(config)["server"]["external"]["metrics"] is True
    config["models"].append({"name": "other", "source": "embedded"})
    with pytest.raises(ConfigError, match="server.external measures one endpoint, but models lists 2"):
        validated(config)


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def dataset_workload(path: Path, api: str = "completions", **dataset) -> dict:
    return {
        "study_prompts": False,
        "api": api,
        "source": "dataset",
        "dataset": {**DATASET, "path": str(path), "output_tokens": 16, **dataset},
        "synthetic": {"num_requests": 0, "preset": "alpaca"},
    }


def test_a_seeded_sample_that_fits_the_engine_with_what_was_dropped(tmp_path, tokenizer):
    from infbench.workload.requests import build_workload, count_tokens

    rng = random.Random(1)
    words = "cache page block token request memory server model".split()
    rows = [{"prompt": " ".join(rng.choices(words, k=rng.choice([5, 10, 200])))} for _ in range(60)]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    workload = dataset_workload(path, num_requests=20)
    requests, source = build_workload(tokenizer, workload, 128, 16, seed=0, source_path=path)
    again, _ = build_workload(tokenizer, workload, 128, 16, seed=0, source_path=path)
    other, _ = build_workload(tokenizer, workload, 128, 16, seed=1, source_path=path)
    assert [r.to_json() for r in requests] == [r.to_json() for r in again]
    assert [r.id for r in requests] != [r.id for r in other]
    assert len(requests) == source["kept"] == 20
    long_rows = {i + 1 for i, row in enumerate(rows) if count_tokens(tokenizer, row["prompt"]) + 16 > 128}
    assert long_rows and not {int(r.id.split("-")[1]) for r in requests} & long_rows
    assert source["dropped"]["too_long"] == source["rows_examined"] - 20 > 0
    assert source["sha256"] == checksum(path) and source["rows_in_source"] == 60
    for request in requests:
        assert request.prompt == rows[int(request.id.split("-")[1]) - 1]["prompt"] and request.max_tokens == 16
    with pytest.raises(WorkloadError, match="no row fits engine.max_model_len = 20 .*raise engine.max_model_len"):
        build_workload(tokenizer, workload, 20, 16, seed=0, source_path=path)


def test_sharegpt_output_lengths_are_the_replies_token_counts(tmp_path, tokenizer):
    from infbench.workload.requests import build_workload

    reply = "Paging splits memory into fixed-size blocks so that no request needs one contiguous region."
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(sharegpt([["What is paging in an operating system?", reply], ["Hi", "Hello there!"]])))
    requests, source = build_workload(tokenizer, dataset_workload(path, num_requests=5), 512, 16, 0, path)
    assert [r.max_tokens for r in requests] == [len(tokenizer(reply, add_special_tokens=False)["input_ids"])]
    assert source["format"] == "sharegpt" and source["dropped"]["too_short"] == 1  # "Hi" is under 4 tokens


def test_chat_prompts_are_the_template_around_the_user_turn(tmp_path, tokenizer):
    from infbench.workload.requests import build_workload, prompt_token_ids

    path = tmp_path / "p.csv"
    pd.DataFrame({"prompt": PROMPTS}).to_csv(path, index=False)
    plain, _ = build_workload(tokenizer, dataset_workload(path, num_requests=3), 512, 16, 0, path)
    chat, _ = build_workload(tokenizer, dataset_workload(path, "chat", num_requests=3), 512, 16, 0, path)
    for as_is, templated in zip(plain, chat):
        assert templated.messages == [{"role": "user", "content": as_is.prompt}]
        expected = tokenizer.apply_chat_template(templated.messages, tokenize=False, add_generation_prompt=True)
        assert templated.prompt == expected and templated.api == "chat"
        # The template holds the special tokens: tokenizing it adds none (as vLLM's chat endpoint).
        ids = prompt_token_ids(tokenizer, templated.to_json())
        assert ids == tokenizer(expected, add_special_tokens=False)["input_ids"]
        assert len(ids) == templated.prompt_tokens > as_is.prompt_tokens
    tokenizer_without = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    tokenizer_without.chat_template = None
    with pytest.raises(WorkloadError, match="has no chat template; set workload.api: completions"):
        build_workload(tokenizer_without, dataset_workload(path, "chat", num_requests=3), 512, 16, 0, path)
