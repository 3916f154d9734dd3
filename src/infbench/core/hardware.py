"""What this machine has: CPU model and SIMD flags, cores, memory, GPUs, and the dtype that
runs fastest on it. Probed, never assumed: machines of one kind differ."""

from __future__ import annotations

import os
import platform
from pathlib import Path

# SIMD flags that decide which kernels an engine can use (bf16 natively or emulated).
SIMD_FLAGS = ("avx", "avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma", "neon", "asimd")


def native_bf16_cpu(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
    try:
        flags = Path(cpuinfo_path).read_text()
    except OSError:
        return False
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16"))


def resolve_dtype(dtype: str, device: str) -> str:
    """`auto`: bf16 on GPUs and on CPUs with native bf16; float32 elsewhere (bf16 is emulated there and slower)."""
    if dtype != "auto":
        return dtype
    if device == "cuda" or native_bf16_cpu():
        return "bfloat16"
    return "float32"


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
    return {
        "model": model,
        "simd_flags": [flag for flag in SIMD_FLAGS if flag in flags],
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


def gpu_names() -> list[str]:
    try:
        import torch

        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []
