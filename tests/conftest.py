"""Shared fixtures: the embedded model converted once, a tiny 2-layer model cut from it, and
helpers to run the real workflow in a scratch working directory."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("INFBENCH_TEST_CACHE", REPO / ".test-cache"))


def load_default_config() -> dict:
    with open(REPO / "config" / "config.yaml") as handle:
        return yaml.safe_load(handle)


@pytest.fixture
def default_config() -> dict:
    return copy.deepcopy(load_default_config())


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    """The embedded default model, converted by the real `model` code once per cache."""
    from infbench.models import resolve_model

    folder = CACHE / "models" / "smollm2-135m-instruct"
    if not (folder / "model.json").is_file():
        resolve_model({"name": "smollm2-135m-instruct", "source": "embedded"}, folder, CACHE / "downloads")
    return folder


@pytest.fixture(scope="session")
def tiny_model(embedded_model) -> Path:
    """The first two layers of the embedded model with its real tokenizer: same shapes per
    layer and the same vocabulary, about 15x less compute, so engine tests run fast."""
    from infbench.models import truncate_layers

    folder = CACHE / "models" / "tiny-smollm2-2layers"
    if not (folder / "config.json").is_file():
        truncate_layers(embedded_model, folder, num_layers=2)
    return folder


def tiny_config(model_dir: Path, **overrides) -> dict:
    """The default config scaled down to the tiny model and a handful of requests."""
    config = load_default_config()
    config["models"] = [{"name": "tiny", "source": "local", "path": str(model_dir)}]
    config["engine"]["max_model_len"] = 256
    config["engine"]["kv_cache_gib"] = 0.25
    config["workload"]["synthetic"].update(num_requests=4, preset="custom",
                                           prompt_tokens={"mean": 24, "sigma": 0.5, "min": 4, "max": 64},
                                           output_tokens={"mean": 12, "sigma": 0.5, "min": 4, "max": 24})
    config["benchmark"].update(warmup_runs=1, repeats=2, study_max_new_tokens=[16], batch_sizes=[2])
    config["server"].update(warm_requests=2, startup_timeout_s=240)
    # The tiny model finishes a level in about a second: scrape often enough to see it busy.
    config["load"].update(concurrency=[1, 4], request_rates=[4.0], requests_per_level=16, metrics_interval_s=0.05)
    config["allocator"].update(sharegpt_requests=200)
    config["tuning"].update(enabled=True, grid={"max_num_seqs": [2, 8]}, requests=8, concurrency=8)
    for section, values in overrides.items():
        config[section].update(values)
    return config


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run the real snakemake CLI on this repository's Snakefile in `workdir`."""
    command = [str(Path(sys.executable).parent / "snakemake"), "--snakefile", str(REPO / "Snakefile"),
               "--directory", str(workdir), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def dry_run_jobs(stdout: str) -> dict[str, str]:
    """Rule name -> its indented block (input, output, resources, ...) in a dry run's output."""
    import re

    return {match.group(1): match.group(2)
            for match in re.finditer(r"^rule (\w+):\n((?:    .*\n?)*)", stdout, flags=re.M)}


def write_config(workdir: Path, config: dict) -> Path:
    path = workdir / "config" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, tiny_model) -> Path:
    """The whole default pipeline on the tiny model, run once with `--cores 8` like a user."""
    workdir = tmp_path_factory.mktemp("tiny-run")
    write_config(workdir, tiny_config(tiny_model))
    snakemake(workdir, "--cores", "8")
    return workdir
