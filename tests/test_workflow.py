"""The workflow as Snakemake sees it: lint, dry runs, config refusal, and a real tiny run."""

import json
import re

from conftest import (
    PIPELINE_RULES,
    REPO,
    copy_checkout,
    dry_run_jobs,
    load_default_config,
    snakemake,
    tiny_config,
    write_config,
)

from infbench.core.artifacts import read_jsonl, validate
from infbench.core.code_inputs import NEVER_CHANGE_A_NUMBER, number_code


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
    assert len(requests) == 2 + tiny_config(tiny_model)["workload"]["synthetic"]["num_requests"]  # study + synthetic
    assert all(r["prompt_tokens"] + r["max_tokens"] <= 256 for r in requests)
    assert (tmp_path / "logs/workload/tiny.log").read_text().strip()
    # Nothing changed: a second run has nothing to do.
    assert (
        "Nothing to be done"
        in snakemake(tmp_path, "--cores", "2", "resources/models/tiny", "results/tiny/workload.jsonl").stderr
    )


def test_code_inputs_follow_imports_and_leave_out_what_never_changes_a_number(tmp_path):
    """A planted package: the derived inputs are every module reached by imports (inside
    functions too, through `from a import b`), but not the modules that never change a number,
    nor a package __init__ that holds only its docstring; nothing that is not imported."""
    package = tmp_path / "infbench"
    files = {
        "__init__.py": '"""docstring only"""\n',
        "core/__init__.py": '"""docstring only"""\n',
        "core/provenance.py": "from infbench.core import hardware\n",
        "core/hardware.py": "",
        "core/stats.py": "",
        "serving/__init__.py": "from infbench.serving.client import run\n",
        "serving/client.py": "def run():\n    from infbench.core.stats import mean\n",
        "serving/unused.py": "",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    script = tmp_path / "script.py"
    script.write_text("from infbench.core import provenance\nfrom infbench import serving\n")
    found = {path.relative_to(package).as_posix() for path in number_code(script, package)}
    assert found == {"serving/__init__.py", "serving/client.py", "core/stats.py"}


def test_each_rule_declares_its_projects_own_code_its_script_imports(tmp_path):
    """In a project of its own (a copy of this checkout, not the one the package was installed
    from), every rule has a script named after it, and its code inputs are that project's own
    package files its script imports (relative, so a moved project reruns nothing), leaving out
    exactly the modules that never change a number."""
    project = copy_checkout(tmp_path / "project")
    config = load_default_config()
    config["tuning"]["enabled"] = True
    config["prefix_caching"]["enabled"] = True
    config["client_fidelity"]["enabled"] = True
    config["paging_live"]["enabled"] = True
    config["variants"]["enabled"] = True
    config["benchmark"]["rounds"] = 2
    write_config(project, config)
    jobs = dry_run_jobs(snakemake(project, "--cores", "8", "--dry-run").stdout)
    assert set(jobs) >= PIPELINE_RULES | {"download_model", "tuning"}
    package = project / "src" / "infbench"
    for entry in NEVER_CHANGE_A_NUMBER:
        assert (package / entry).is_file(), entry
    declared = {}
    for rule, block in jobs.items():
        if rule == "all":
            continue
        script = project / "scripts" / f"{rule.removesuffix('_round')}.py"  # later rounds rerun the same script
        assert script.is_file(), f"rule {rule} has no script named after it"
        inputs = re.search(r"^    input: (.*)$", block, flags=re.M).group(1).split(", ")
        code = [path for path in inputs if "infbench/" in path]
        assert code and all(path.startswith("src/infbench/") for path in code), (rule, code)
        declared[rule] = {path.removeprefix("src/infbench/") for path in code}
        assert {project / "src/infbench" / path for path in declared[rule]} == set(number_code(script, package)), rule
    # Independent of the derivation: what a few rules' numbers are known to depend on.
    assert {"engines/servers.py", "serving/client.py", "serving/sweep.py", "core/metrics.py"} <= declared["serve"]
    # With prefix caching on, shared blocks follow from prompts tokenized as the workload does.
    kv_code = {
        "kv/simulator.py",
        "kv/validation.py",
        "workload/requests.py",
        "workload/sources.py",
        "workload/traces.py",
    }
    assert kv_code == declared["kv_validation"]
    assert "capacity/search.py" in declared["capacity"] and "capacity/search.py" in declared["tuning"]
    assert "engines/external_endpoint.py" not in declared["paging_live"] | declared["client_fidelity"]
    for rule, files in declared.items():
        assert not files & NEVER_CHANGE_A_NUMBER, rule
