"""The workflow as Snakemake sees it: lint, dry runs, config refusal, and a real tiny run."""

import json


from conftest import REPO, snakemake, tiny_config, write_config
from infbench.artifacts import read_jsonl, validate


def test_lint_is_clean(tmp_path):
    result = snakemake(REPO, "--lint")
    assert "Congratulations, your workflow is in a good condition" in result.stdout + result.stderr


def test_dry_run_lists_every_stage_of_the_default_config(tmp_path):
    result = snakemake(tmp_path, "--configfile", str(REPO / "config" / "config.yaml"), "--cores", "8", "--dry-run")
    for rule in ("model", "workload", "all"):
        assert f"rule {rule}:" in result.stdout, result.stdout


def test_bad_config_stops_before_any_job(tmp_path):
    result = snakemake(tmp_path, "--configfile", str(REPO / "config" / "config.yaml"), "--config", "seed=-3",
                       "--cores", "1", check=False)
    assert result.returncode != 0
    assert "config error: seed = -3 is not allowed" in result.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "resources").exists()


def test_tiny_model_through_model_and_workload(tmp_path, tiny_model):
    write_config(tmp_path, tiny_config(tiny_model))
    snakemake(tmp_path, "--cores", "2", "resources/models/tiny", "results/tiny/workload.jsonl")
    facts = json.loads((tmp_path / "resources/models/tiny/model.json").read_text())
    validate(facts, "model")
    assert facts["num_layers"] == 2 and facts["source"]["kind"] == "local"
    requests = read_jsonl(tmp_path / "results/tiny/workload.jsonl")
    assert [r["kind"] for r in requests[:2]] == ["study_single", "study_api"]
    assert requests[0]["prompt_tokens"] == 11  # the study's prompt is 11 tokens with this tokenizer
    assert len(requests) == 2 + 4
    assert all(r["prompt_tokens"] + r["max_tokens"] <= 256 for r in requests)
    assert (tmp_path / "logs/workload/tiny.log").read_text().strip()
    # Nothing changed: a second run has nothing to do.
    assert "Nothing to be done" in snakemake(tmp_path, "--cores", "2", "resources/models/tiny",
                                             "results/tiny/workload.jsonl").stderr
