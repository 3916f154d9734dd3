"""Beyond one machine: the shared output cache, the SLURM profile, and jobs run as separately
submitted processes through the generic cluster executor."""

import os
import subprocess

import pytest
from conftest import REPO, dry_run_jobs, load_default_config, snakemake, tiny_config, write_config

from infbench.core.artifacts import read_json, validate


@pytest.mark.slow
def test_second_working_directory_reuses_the_cached_model(tmp_path):
    cache = tmp_path / "shared-cache"
    cache.mkdir()
    env = {**os.environ, "SNAKEMAKE_OUTPUT_CACHE": str(cache)}
    config = load_default_config()
    config["models"] = [{"name": "cached-smollm2", "source": "embedded"}]
    runs = {}
    for name in ("alice", "bob"):
        workdir = tmp_path / name
        write_config(workdir, config)
        # The helper puts Snakemake's output in the failure message.
        runs[name] = snakemake(
            workdir, "--cache", "--cores", "2", "resources/models/cached-smollm2", env=env, timeout=900
        )
    first, second = tmp_path / "alice", tmp_path / "bob"
    assert "to cache" in runs["alice"].stderr
    assert "from cache" in runs["bob"].stderr
    # The download and the conversion ran once: in the second directory neither script ran
    # (Snakemake creates a rule's log file; the script never wrote into it).
    assert "Converting" in (first / "logs/model/cached-smollm2.log").read_text()
    assert "downloaded" in (first / "logs/download_model/cached-smollm2.log").read_text()
    for log in ("logs/model/cached-smollm2.log", "logs/download_model/cached-smollm2.log"):
        assert not (second / log).exists() or (second / log).read_text() == "", log
    facts = read_json(second / "resources/models/cached-smollm2/model.json")
    assert facts == read_json(first / "resources/models/cached-smollm2/model.json")
    assert (second / "resources/models/cached-smollm2/model.safetensors").stat().st_size > 100_000_000


def test_slurm_profile_dry_run_requests_gpus_on_cuda(tmp_path):
    write_config(tmp_path, load_default_config())
    result = snakemake(
        tmp_path,
        "--profile",
        str(REPO / "profiles/slurm"),
        "--workflow-profile",
        "none",
        "--configfile",
        str(tmp_path / "config/config.yaml"),
        str(REPO / "config/gpu.yaml"),
        "--dry-run",
    )
    blocks = dry_run_jobs(result.stdout)
    for rule in ("hf_baseline", "vllm_offline", "serve"):
        assert "gpu=1" in blocks[rule] and "slurm_account=REPLACE_WITH_YOUR_ACCOUNT" in blocks[rule], blocks[rule]
    assert "gpu=1" not in blocks["workload"]


def test_jobs_run_as_separately_submitted_processes(tmp_path, tiny_model):
    """Each job is submitted through a command, as on a cluster, and runs in a process of its
    own: nothing is shared in memory between jobs."""
    write_config(tmp_path, tiny_config(tiny_model))
    submissions = tmp_path / "submitted.txt"
    env = {**os.environ, "LOCAL_SUBMIT_LOG": str(submissions)}
    command = [
        str(REPO / ".venv/bin/snakemake"),
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(tmp_path),
        "--executor",
        "cluster-generic",
        "--cluster-generic-submit-cmd",
        str(REPO / "tests/local_submit.sh"),
        "--jobs",
        "2",
        "--latency-wait",
        "30",
        "results/tiny/workload.jsonl",
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    validate(read_json(tmp_path / "results/tiny/workload_summary.json"), "workload_summary")
    job_ids = submissions.read_text().split()
    assert len(job_ids) == 2 and len(set(job_ids)) == 2  # model, workload
    assert os.getpid() not in map(int, job_ids)
