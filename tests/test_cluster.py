"""Beyond one machine: the pipeline through SLURM's sbatch on a one-node cluster run here
(tests/slurm.py), a cancelled job, two models fanned out as separate jobs, the shared output
cache, and the SLURM profile's GPU requests."""

import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import slurm
import yaml
from conftest import REPO, dry_run_jobs, load_default_config, snakemake, tiny_config, write_config
from test_serve import group_members, server_group, wait_for_line, wait_gone

from infbench.core.artifacts import read_json
from infbench.engines.vllm_server import port_is_free
from infbench.stages import STAGES


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = slurm.unavailable()
    if reason:
        if os.environ.get("CI"):  # CI's setup installs SLURM: a missing cluster there is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    running = slurm.SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


def user_profile(tmp_path) -> str:
    """profiles/slurm with its two placeholders filled in, as the docs tell a user to."""
    text = (REPO / "profiles/slurm/config.yaml").read_text()
    filled = text.replace("REPLACE_WITH_YOUR_ACCOUNT", slurm.ACCOUNT).replace(
        "REPLACE_WITH_YOUR_PARTITION", slurm.PARTITION
    )
    assert filled.count(slurm.ACCOUNT) == 1 and filled.count(slurm.PARTITION) == 1
    folder = tmp_path / "profile"
    folder.mkdir()
    (folder / "config.yaml").write_text(filled)
    return str(folder)


SNAKEMAKE = str(REPO / ".venv/bin/snakemake") if (REPO / ".venv/bin/snakemake").exists() else shutil.which("snakemake")
# Snakemake with the SLURM plugin's status checks at most 2 s apart (its back-off, 10 s more
# after each check that finds nothing finished, cost about a minute a test here).
SNAKEMAKE_ON_SLURM = [sys.executable, str(REPO / "tests/snakemake_quick_polls.py")]


def slurm_command(workdir, profile: str, *args: str) -> list[str]:
    """Snakemake through the SLURM executor as docs/clusters-and-caches.md gives it. Without an
    accounting daemon job states come from squeue; the first status check after 2 s, not the
    plugin's 40, and the next at most 2 s apart (SNAKEMAKE_ON_SLURM) keep the test short."""
    return [
        *SNAKEMAKE_ON_SLURM,
        "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--profile", profile, "--workflow-profile", "none",
        "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "2",
        *args,
    ]  # fmt: skip


def text_of(path) -> str:
    return path.read_text() if path.exists() else ""


def submitted(output: str) -> dict[int, tuple[str, str]]:
    """{SLURM job id: (rule, SLURM log)} of every job Snakemake says it submitted."""
    found = re.finditer(r"submitted with SLURM jobid (\d+) \(log: (\S+/rule_(\w+)/\S+\.log)\)", output)
    return {int(m.group(1)): (m.group(3), m.group(2)) for m in found}


@pytest.mark.slow
def test_second_working_directory_reuses_the_cached_model(tmp_path):
    """On one machine. Through the SLURM executor the cache is looked up inside the model's job,
    which keys it differently and converts again (docs/clusters-and-caches.md)."""
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


def fake_slurm(folder) -> dict:
    """An environment whose `sbatch` records each call and submits nothing, and whose
    `sacctmgr` lists the test's account, so that the SLURM executor builds its real sbatch lines
    on a machine with no cluster running."""
    bin_dir = folder / "fake-slurm"
    bin_dir.mkdir()
    record = f'printf "%s\\n" "$*" >> {bin_dir}/calls'
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\n{record}\necho "sbatch: error: recorded, not submitted" >&2\nexit 1\n')
    (bin_dir / "sacctmgr").write_text(f"#!/bin/sh\necho {slurm.ACCOUNT}\n")
    for tool in ("sbatch", "sacctmgr"):
        (bin_dir / tool).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.slow  # two Snakemake runs of a few seconds
def test_the_sbatch_line_asks_for_a_gpu_on_cuda_engine_rules_only(tmp_path):
    """With config/gpu.yaml, the SLURM executor's own sbatch lines (recorded by a stand-in
    sbatch) carry --gpus=1 for the engine rules and not for the workload; the profile's account,
    partition, memory, runtime and --exclusive as claimed. The engine rules' inputs stand in
    as empty files and folders, all of one time, so that those rules are the ones due."""
    model = load_default_config()["models"][0]["name"]
    write_config(tmp_path, load_default_config())
    env = fake_slurm(tmp_path)
    engine_targets = [f"results/{model}/{name}.json" for name in ("hf_baseline", "vllm_offline", "load")]
    options = [
        "--profile", user_profile(tmp_path), "--workflow-profile", "none",
        "--configfile", str(tmp_path / "config/config.yaml"), str(REPO / "config/gpu.yaml"),
        "--slurm-init-seconds-before-status-checks", "1", "--latency-wait", "1", "--keep-going",
    ]  # fmt: skip
    # Snakemake's side, the whole default run planned: every measuring rule asks for a GPU.
    everything = dry_run_jobs(snakemake(tmp_path, *options, "--dry-run", "--forceall").stdout)
    profile = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())
    due = set(everything) & {rule for rule, res in profile["set-resources"].items() if "slurm_extra" in res}
    assert {"hf_baseline", "vllm_offline", "serve", "capacity", "paging_live", "machine"} <= due, due
    assert all("gpu=1" in everything[rule] for rule in due) and "gpu=1" not in everything["workload"]
    # The plugin's side: the sbatch lines of the engine rules due once their inputs are there.
    planned = dry_run_jobs(snakemake(tmp_path, *options, "--dry-run", "--forceall", *engine_targets).stdout)
    now = time.time()
    for rule in ("download_model", "model", "workload"):
        (outputs,) = [line.split(": ", 1)[1] for line in planned[rule].splitlines() if "output:" in line]
        for output in (tmp_path / name for name in outputs.split(", ")):
            output.parent.mkdir(parents=True, exist_ok=True)
            output.mkdir() if not output.suffix else output.touch()
            os.utime(output, (now, now))
    snakemake(tmp_path, *options, *engine_targets, check=False, env=env)
    snakemake(tmp_path, *options, "--forcerun", "workload", f"results/{model}/workload.jsonl", check=False, env=env)
    calls = {
        re.search(r"--comment rule_(\w+?)(?:_wildcards_\S+)? ", line).group(1): line
        for line in (tmp_path / "fake-slurm/calls").read_text().splitlines()
        if line.startswith("--parsable")
    }
    # The engine rules due once their inputs are there, the bandwidth probe and the live KV check
    # (on in gpu.yaml) among them, each on a GPU of a whole node.
    engine_rules = {"hf_baseline", "vllm_offline", "serve", "paging_live", "machine"}
    assert set(calls) == engine_rules | {"workload"}, calls
    for rule in engine_rules:
        line = calls[rule]
        assert " --gpus=1 " in line and " --exclusive " in line and " --cpus-per-task=8 " in line, line
        assert f" -A {slurm.ACCOUNT} -p {slurm.PARTITION} " in line, line
    assert " --mem 16000 " in calls["serve"] and " -t 120 " in calls["serve"]
    assert "--gpus" not in calls["workload"] and "--exclusive" not in calls["workload"]
    assert " --mem 8000 " in calls["workload"] and " --cpus-per-task=1 " in calls["workload"]


def test_every_measuring_rule_asks_slurm_for_a_whole_node():
    """The profile's --exclusive rules are the rules that record a run time, and the bandwidth probe."""
    profile = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())
    exclusive = {rule for rule, res in profile["set-resources"].items() if res.get("slurm_extra") == "'--exclusive'"}
    measured = {stage.name for stage in STAGES if stage.measured}
    assert exclusive == measured | {"hf_baseline_round", "vllm_offline_round", "machine"}


def test_the_pipeline_through_sbatch_cancelled_mid_level_then_continued(cluster, tiny_model, tmp_path):
    """Two models fanned out as separate jobs on the test cluster. The first serve job seen
    measuring is cancelled with scancel: its vLLM server stops (no process left, port free), it
    leaves no artifact, Snakemake names the job's SLURM log, and the other model goes on
    (--keep-going). The same command again runs only what the cancel left undone, and the
    report on the head node shows both models. SLURM's own record (jobcomp) holds exactly the
    jobs Snakemake submitted, with the profile's resources, and the measuring jobs on a whole
    node (their --exclusive replaces the laptop's one-benchmark-at-a-time slot: asked for one
    CPU here, each is allocated all of the node's; without --exclusive, one)."""
    earlier = set(cluster.finished_jobs())  # another test's jobs on the same cluster
    copy = tmp_path / "tiny-copy"
    shutil.copytree(tiny_model, copy)
    config = tiny_config(
        tiny_model,
        hf_baseline={"enabled": False},
        vllm_offline={"enabled": False},
        capacity={"enabled": False},
        client_fidelity={"enabled": False},
        prefix_caching={"enabled": False},
        variants={"enabled": False},
        paging_live={"enabled": False},
        load={"concurrency": [4], "request_rates": [], "chat_concurrency": [], "ramp": None, "repeats": 1},
    )
    config["models"].append({"name": "tiny-copy", "source": "local", "path": str(copy)})
    workdir = tmp_path / "project"
    write_config(workdir, config)
    command = slurm_command(workdir, user_profile(tmp_path), "--keep-going", "--set-threads", "serve=1", "machine=1")

    first_output = tmp_path / "first-run.txt"
    with open(first_output, "w") as sink:
        first = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, text=True)
        try:
            logs = {model: workdir / f"logs/serve/{model}.log" for model in ("tiny", "tiny-copy")}
            deadline = time.monotonic() + 600
            while not (
                measuring := [m for m, log in logs.items() if log.exists() and "study request" in log.read_text()]
            ):
                assert first.poll() is None and time.monotonic() < deadline, first_output.read_text()[-3000:]
                time.sleep(0.5)
            cancelled = measuring[0]
            port = wait_for_line(logs[cancelled], r"server ready on http://127\.0\.0\.1:(\d+)").group(1)
            pgid = server_group(port)
            assert len(group_members(pgid)) >= 2  # the API server and its engine core
            job = next(
                j
                for j, (rule, log) in submitted(first_output.read_text()).items()
                if rule == "serve" and f"/{cancelled}/" in log
            )
            subprocess.run(["scancel", str(job)])  # a job that finished first shows in its record below
            first.wait(timeout=900)
        finally:
            if first.poll() is None:  # a failed assert: Snakemake cancels its jobs on SIGTERM
                first.terminate()
                try:
                    first.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    first.kill()
    output = first_output.read_text()
    assert first.returncode != 0
    assert f"SLURM-job '{job}' failed, SLURM status is: 'CANCELLED'" in output, output[-3000:]
    slurm_log = submitted(output)[job][1]
    assert slurm_log in output.split(f"SLURM-job '{job}' failed", 1)[1]  # its SLURM log is named
    # The stage itself unwound on SLURM's SIGTERM (SLURM's own KILL would follow KillWait later).
    assert "KeyboardInterrupt: signal 15" in (workdir / f"logs/serve/{cancelled}.log").read_text()
    assert "interrupted; partial outputs were removed" in (workdir / slurm_log).read_text()
    assert not wait_gone(pgid, 30), "the cancelled job's vLLM server survived"
    assert port_is_free(int(port))
    left = [path.name for pattern in ("load*", "server*") for path in (workdir / f"results/{cancelled}").glob(pattern)]
    assert left == [], left  # no artifact, request table or server record of the cancelled job
    other = next(model for model in logs if model != cancelled)
    assert (workdir / f"results/{other}/load.json").exists()  # the other model went on

    second = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    rerun = submitted(second.stdout + second.stderr)
    assert sorted(rule for rule, log in rerun.values()) == ["kv_validation", "serve"]
    assert all(f"/{cancelled}/" in log for rule, log in rerun.values())
    report = (workdir / "results/report.html").read_text()
    assert all(re.search(rf"<th[^>]*>\s*{model}\s*</th>", report) for model in ("tiny", "tiny-copy"))

    jobs = {**submitted(output), **rerun}
    record = {j: fields for j, fields in cluster.finished_jobs().items() if j not in earlier}
    assert set(record) == set(jobs), "SLURM's record and Snakemake's submissions differ"
    counts = Counter(rule for rule, _ in jobs.values())
    assert counts == {"model": 2, "workload": 2, "machine": 1, "serve": 3, "kv_validation": 2}, counts
    assert record[job]["JobState"] == "CANCELLED"
    assert all(record[j]["JobState"] == "COMPLETED" for j in jobs if j != job)
    for j, (rule, _) in jobs.items():
        mem = dict(item.split("=") for item in record[j]["Tres"].split(","))["mem"]
        if rule in {"serve", "machine"}:  # measuring: the whole node (ProcCnt: the CPUs allocated)
            assert int(record[j]["ProcCnt"]) == slurm.node()["CPUs"], record[j]
        if rule == "serve":  # the rule's mem_mb and runtime
            assert (mem, record[j]["TimeLimit"]) == ("16000M", "120"), record[j]
        if rule == "workload":  # the profile's defaults, one CPU
            assert (mem, record[j]["TimeLimit"], record[j]["ProcCnt"]) == ("8000M", "60", "1"), record[j]


def test_a_model_cached_from_an_allocation_is_linked_not_rebuilt_by_the_next_cluster_run(cluster, tiny_model, tmp_path):
    """The shared cache on a cluster as docs/clusters-and-caches.md gives it: the model folder
    brought in by a local run inside an allocation (`srun ... snakemake resources/models/NAME
    --cores N --cache`). The first working directory stores it, the second links it from the
    cache without running the model step; the second's run through sbatch then submits the
    workload job alone."""
    cache = tmp_path / "shared-cache"
    cache.mkdir()
    env = {**os.environ, "SNAKEMAKE_OUTPUT_CACHE": str(cache)}
    config = tiny_config(tiny_model)
    model = config["models"][0]["name"]
    outputs = {}
    for name in ("alice", "bob"):
        workdir = tmp_path / name
        write_config(workdir, config)
        local = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
        # The target before --cache, which would take it for a rule name.
        in_allocation = ["srun", "--mem=4000", "-c", "1", "-p", slurm.PARTITION, *local]
        in_allocation += [f"resources/models/{model}", "--cores", "1", "--cache"]
        outputs[name] = subprocess.run(in_allocation, env=env, capture_output=True, text=True, timeout=600)
        assert outputs[name].returncode == 0, outputs[name].stderr[-3000:]
    assert "to cache" in outputs["alice"].stderr and "from cache" in outputs["bob"].stderr
    # The model step ran in the first directory (its own line in its log) and not in the second.
    assert f"{model}: " in text_of(tmp_path / "alice/logs/model" / f"{model}.log")
    assert text_of(tmp_path / "bob/logs/model" / f"{model}.log") == ""
    (entry,) = cache.iterdir()  # one entry: the model folder, its files linked from it
    linked = [
        path for path in (tmp_path / "bob/resources/models" / model).iterdir() if path.name != ".snakemake_timestamp"
    ]
    assert linked and all(Path(os.readlink(path)).parent == entry for path in linked), linked
    result = subprocess.run(
        slurm_command(tmp_path / "bob", user_profile(tmp_path), f"results/{model}/workload.jsonl", "--cache"),
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert [rule for rule, _ in submitted(result.stdout + result.stderr).values()] == ["workload"]
