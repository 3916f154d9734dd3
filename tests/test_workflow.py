"""The workflow as Snakemake sees it: lint, dry runs, config refusal, and a real tiny run."""

import ast
import json
import os
import re
from pathlib import Path

from conftest import PIPELINE_RULES, REPO, dry_run_jobs, load_default_config, snakemake, tiny_config, write_config

from infbench.artifacts import read_jsonl, validate


def test_lint_is_clean(tmp_path):
    result = snakemake(REPO, "--lint")
    assert "Congratulations, your workflow is in a good condition" in result.stdout + result.stderr


def test_dry_run_lists_every_stage_of_the_default_config(tmp_path):
    result = snakemake(tmp_path, "--configfile", str(REPO / "config" / "config.yaml"), "--cores", "8", "--dry-run")
    for rule in ("model", "workload", "all"):
        assert f"rule {rule}:" in result.stdout, result.stdout


def test_bad_config_stops_before_any_job(tmp_path):
    result = snakemake(
        tmp_path,
        "--configfile",
        str(REPO / "config" / "config.yaml"),
        "--config",
        "seed=-3",
        "--cores",
        "1",
        check=False,
    )
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
    assert (
        "Nothing to be done"
        in snakemake(tmp_path, "--cores", "2", "resources/models/tiny", "results/tiny/workload.jsonl").stderr
    )


# Modules that never change a number (workflow/rules/common.smk says why): no rule declares them.
NOT_NUMBERS = {"__init__", "artifacts", "config", "errors", "hardware", "provenance", "rule_logging"}
PACKAGE = REPO / "src" / "infbench"


def module_file(module: str) -> Path:
    """infbench.a.b -> src/infbench/a/b.py, or the package's __init__.py."""
    path = PACKAGE.joinpath(*module.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def package_imports(path: Path, seen: set[Path] | None = None) -> set[Path]:
    """Every file of the package that `path` imports, directly or through other package modules."""
    seen = set() if seen is None else seen
    for node in ast.walk(ast.parse(path.read_text())):
        modules = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "infbench":
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for module in modules:
            if module.split(".")[0] != "infbench":
                continue
            file = module_file(module)
            if file.is_file() and file not in seen:
                seen.add(file)
                package_imports(file, seen)
                if file.name != "__init__.py" and (file.parent / "__init__.py").is_file():
                    seen.add(file.parent / "__init__.py")  # importing a.b runs a/__init__.py first
    return seen


def test_each_rule_declares_the_code_its_numbers_depend_on(tmp_path):
    """A rule's declared package modules are exactly what its script imports from the package
    (transitively), minus the modules that never change a number: a missing one would let a
    code change go unnoticed, an extra one would rerun a measurement for nothing."""
    config = load_default_config()
    config["tuning"]["enabled"] = True
    config["prefix_caching"]["enabled"] = True
    config["benchmark"]["rounds"] = 2
    write_config(tmp_path, config)
    jobs = dry_run_jobs(snakemake(tmp_path, "--cores", "8", "--dry-run").stdout)
    assert set(jobs) >= PIPELINE_RULES | {"download_model"}
    for rule, block in jobs.items():
        if rule == "all":
            continue
        script = REPO / "scripts" / f"{rule.removesuffix('_round')}.py"  # later rounds rerun the same script
        assert script.is_file(), f"rule {rule} has no script named after it"
        inputs = re.search(r"^    input: (.*)$", block, flags=re.M).group(1).split(", ")
        declared = {Path(os.path.normpath(tmp_path / path)) for path in inputs if "src/infbench/" in path}
        expected = {
            file
            for file in package_imports(script)
            if file.relative_to(PACKAGE).with_suffix("").as_posix() not in NOT_NUMBERS
        }
        assert declared == expected, (
            f"rule {rule}: declared but not imported: {sorted(map(str, declared - expected))}; "
            f"imported but not declared: {sorted(map(str, expected - declared))}"
        )
