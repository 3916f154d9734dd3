"""A finished run read back for comparison: a project folder, its `results/` folder, an archive
made by `runs.archive.pack`, or the result file of vLLM's own benchmark (`vllm bench serve
--save-result`). Each becomes a `RunResults`: its artifacts per model and its provenance as
flat `key -> values` pairs, so that runs can be told apart by what differs between them."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from infbench.core.errors import UserError
from infbench.runs.archive import ARCHIVE_SUFFIXES, unpack

# The artifacts a comparison reads from results/{model}/ (offline rounds beyond the first are
# left out: a folder can hold rounds of an earlier configuration).
STAGES = (
    "workload_summary",
    "hf_baseline",
    "vllm_offline",
    "offline_comparison",
    "server",
    "load",
    "client_fidelity",
    "tuning",
    "capacity",
)
# The names artifacts had before they took their stages' (a tuning cell's capacity record
# too): a run written then is read under today's, so that it compares with one written now.
FORMER_NAMES = {"capacity": "slo_capacity", "offline_comparison": "comparison"}
VLLM_BENCH = "vllm bench serve"
# Fields every `vllm bench serve --save-result` file has (vllm/benchmarks/serve.py).
VLLM_BENCH_FIELDS = ("backend", "model_id", "completed", "duration", "output_throughput", "median_ttft_ms")


class RunError(UserError):
    """A run that cannot be read: the message names the path, what is wrong and the fix."""


@dataclass
class RunResults:
    source: str
    tool: str  # "infbench" or "vllm bench serve"
    models: dict[str, dict]  # model -> {stage: artifact}
    provenance: dict[str, set[str]] = field(default_factory=dict)  # flat key -> the values it took
    label: str = ""


def flatten(value, prefix: str = "") -> dict[str, str]:
    """Nested mappings as dotted keys; every leaf (lists included) as its JSON text."""
    if isinstance(value, dict) and value:
        flat = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: json.dumps(value, sort_keys=True)}


def run_provenance(models: dict[str, dict]) -> dict[str, set[str]]:
    """Every artifact's provenance, flattened and merged: a key keeps each value it took in
    this run (two values when, say, a rerun made one stage at a later commit). Start and end
    times always differ and are left out."""
    merged: dict[str, set[str]] = {}
    for artifacts in models.values():
        for artifact in artifacts.values():
            provenance = artifact.get("provenance") if isinstance(artifact, dict) else None
            if not provenance:
                continue
            record = {key: value for key, value in provenance.items() if key not in ("started", "finished")}
            for key, value in flatten(record).items():
                merged.setdefault(key, set()).add(value)
    return merged


def read_json_file(path: Path) -> dict:
    try:
        with open(path) as handle:
            return json.load(handle)
    except json.JSONDecodeError as error:
        raise RunError(f"{path} is not valid JSON ({error}); pass an artifact or result file unchanged") from None


def artifact_file(folder: Path, stage: str) -> Path | None:
    """results/{model}/{stage}.json, or in a run written before, the file of its former name."""
    for name in (stage, FORMER_NAMES.get(stage, stage)):
        if (folder / f"{name}.json").is_file():
            return folder / f"{name}.json"
    return None


def pipeline_run(root: Path, source: str) -> RunResults:
    """A project folder (holding results/) or its results/ folder."""
    results = root / "results" if (root / "results").is_dir() else root
    models = {}
    for folder in sorted(path for path in results.iterdir() if path.is_dir()):
        found = {stage: artifact_file(folder, stage) for stage in STAGES}
        artifacts = {stage: read_json_file(path) for stage, path in found.items() if path}
        for cell in artifacts.get("tuning", {}).get("cells", []):
            for name, former in FORMER_NAMES.items():
                if former in cell:
                    cell[name] = cell.pop(former)
        if not artifacts.keys() - {"workload_summary"}:  # a workload alone holds no figures
            continue
        facts = results.parent / "resources" / "models" / folder.name / "model.json"
        if facts.is_file():
            artifacts["model"] = read_json_file(facts)
        models[folder.name] = artifacts
    if not models:
        raise RunError(
            f"{source} holds no results: expected results/<model>/load.json, vllm_offline.json or "
            "hf_baseline.json; pass a project folder after `snakemake --cores 8`, its results/ folder, "
            "or an archive made by `scripts/runs.py pack`"
        )
    provenance = run_provenance(models)
    provenance["tool"] = {json.dumps("infbench")}
    return RunResults(source, "infbench", models, provenance)


def vllm_bench_run(path: Path, source: str) -> RunResults:
    """A `vllm bench serve --save-result` file: one load level, one pass, under the model name
    the file gives (its last path component, as vLLM names result files)."""
    result = read_json_file(path)
    missing = [name for name in VLLM_BENCH_FIELDS if name not in result] if isinstance(result, dict) else ["all"]
    if missing:
        raise RunError(
            f"{source} is neither a run nor a `vllm bench serve --save-result` file (missing "
            f"{', '.join(missing)}); pass a project folder, a results/ folder, a .tar.gz made by "
            "`scripts/runs.py pack`, or vLLM's saved result JSON"
        )
    model = Path(str(result["model_id"]).rstrip("/")).name
    settings = {
        key: result.get(key)
        for key in (
            "backend",
            "endpoint_type",
            "num_prompts",
            "request_rate",
            "burstiness",
            "max_concurrency",
            "ramp_up_strategy",
            "ramp_up_start_rps",
            "ramp_up_end_rps",
            "model_id",
            "tokenizer_id",
        )
        if key in result
    }
    provenance = {f"config.{key}": {json.dumps(value, sort_keys=True)} for key, value in settings.items()}
    provenance["tool"] = {json.dumps(VLLM_BENCH)}
    if "date" in result:
        provenance["date"] = {json.dumps(result["date"])}
    return RunResults(source, VLLM_BENCH, {model: {"vllm_bench": result}}, provenance)


def load_run(location: str | Path, source: str | None = None) -> RunResults:
    """Read one run from a folder, an archive or a vLLM result file; `source` is what to call it
    (default: the path)."""
    path = Path(location)
    source = str(source or location)
    if not path.exists():
        raise RunError(f"{source} does not exist; pass a project folder, its results/ folder or an archive")
    if path.is_dir():
        return pipeline_run(path, source)
    if path.name.endswith(ARCHIVE_SUFFIXES):
        with tempfile.TemporaryDirectory(prefix="infbench-run-") as scratch:
            unpack(path, Path(scratch) / "run")
            return pipeline_run(Path(scratch) / "run", source)
    if path.suffix == ".json":
        return vllm_bench_run(path, source)
    raise RunError(
        f"{source} is not a folder, a .tar.gz archive or a .json result file; pass one of those "
        "(`scripts/runs.py pack` makes the archive)"
    )
