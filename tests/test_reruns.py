"""Reruns cost only what changed: config, code and template edits each rerun exactly the rules
whose numbers (or page) they change, and a finished project moved elsewhere has nothing to do.
Each test edits a copy of the tiny run, never the shared run itself."""

import json
import os
import re
import shutil
import time

import pytest
import yaml
from conftest import PIPELINE_RULES, snakemake, tiny_run_config


def jobs_of(dry_run_stdout: str) -> set[str]:
    return set(re.findall(r"^rule (\w+):", dry_run_stdout, flags=re.M)) - {"all"}


@pytest.fixture
def run_copy(tiny_run, tmp_path):
    """A copy of the finished tiny run, so that the edits below never touch the shared run."""
    copy = tmp_path / "run"
    shutil.copytree(tiny_run, copy, symlinks=True)
    return copy


def test_reruns_redo_only_what_changed(run_copy, tiny_model, tmp_path):
    tiny_run = run_copy
    assert "Nothing to be done" in snakemake(tiny_run, "--cores", "8", "--dry-run").stdout

    config = tiny_run_config(tiny_model)
    changed_load = json.loads(json.dumps(config))
    changed_load["load"]["window_requests"] += 1
    (tmp_path / "load.yaml").write_text(yaml.safe_dump(changed_load))
    dry = snakemake(tiny_run, "--cores", "8", "--dry-run", "--configfile", str(tmp_path / "load.yaml")).stdout
    # The server stage, the live KV check and MBU that read its load, and the report; not the
    # allocator, nor the capacity search (which sends its own probes).
    assert jobs_of(dry) == {"serve", "kv_validation", "utilisation", "html_report"}

    # More offline rounds: only the new rounds and what reads them; round 1 stays.
    more_rounds = json.loads(json.dumps(config))
    more_rounds["benchmark"]["rounds"] += 1
    more_rounds["benchmark"]["agreement_threshold"] = 0.8
    (tmp_path / "rounds.yaml").write_text(yaml.safe_dump(more_rounds))
    dry = snakemake(tiny_run, "--cores", "8", "--dry-run", "--configfile", str(tmp_path / "rounds.yaml")).stdout
    assert jobs_of(dry) == {"hf_baseline_round", "vllm_offline_round", "offline_comparison", "html_report"}

    other_model = tmp_path / "tiny-copy"
    shutil.copytree(tiny_model, other_model)
    changed_model = json.loads(json.dumps(config))
    changed_model["models"][0]["path"] = str(other_model)
    (tmp_path / "model.yaml").write_text(yaml.safe_dump(changed_model))
    dry = snakemake(tiny_run, "--cores", "8", "--dry-run", "--configfile", str(tmp_path / "model.yaml")).stdout
    assert jobs_of(dry) == PIPELINE_RULES

    # Code: a module that computes numbers reruns its rules; provenance and artifact writing rerun nothing.
    package = tiny_run / "src" / "infbench"
    for module, expected in (
        ("kv/validation.py", {"kv_validation", "html_report"}),
        # The one server factory: every stage that starts a server, and what reads their results.
        (
            "engines/servers.py",
            {
                "serve",
                "client_fidelity",
                "prefix_caching",
                "variants",
                "capacity",
                "paging_live",
                "kv_validation",
                "utilisation",
                "html_report",
            },  # fmt: skip
        ),
        ("core/stage.py", set()),
        ("core/provenance.py", set()),
        ("core/artifacts.py", set()),
    ):
        original = (package / module).read_text()
        try:
            (package / module).write_text(original + "# edited by the rerun test\n")
            assert jobs_of(snakemake(tiny_run, "--cores", "8", "--dry-run").stdout) == expected, module
        finally:
            (package / module).write_text(original)

    # A touched template is not a change (Snakemake compares checksums); an edited one is, and
    # the template the rule declares is the one rendered.
    template = tiny_run / "report" / "report.html.j2"
    original = template.read_text()
    os.utime(template)
    assert "Nothing to be done" in snakemake(tiny_run, "--cores", "8", "--dry-run").stdout
    try:
        template.write_text(
            original.replace(
                "<h1>LLM inference benchmark report</h1>", "<h1>LLM inference benchmark report (edited)</h1>"
            )
        )
        assert jobs_of(snakemake(tiny_run, "--cores", "8", "--dry-run").stdout) == {"html_report"}
        started = time.monotonic()
        snakemake(tiny_run, "--cores", "8")
        print(f"report rule after a template change: {time.monotonic() - started:.1f} s")
        assert "(edited)</h1>" in (tiny_run / "results/report.html").read_text()
    finally:
        template.write_text(original)
    snakemake(tiny_run, "--cores", "8")  # back to the real template
    assert "Nothing to be done" in snakemake(tiny_run, "--cores", "8", "--dry-run").stdout


def test_a_finished_project_moved_elsewhere_has_nothing_to_do(tiny_run, tmp_path):
    """Results and .snakemake metadata travel: the whole project copied to another path (as
    `cp -a` would) reruns nothing there."""
    moved = tmp_path / "elsewhere" / "project"
    shutil.copytree(tiny_run, moved, symlinks=True)
    result = snakemake(moved, "--cores", "8", "--dry-run")
    assert "Nothing to be done" in result.stdout, result.stdout[-3000:]
