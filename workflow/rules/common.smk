# Helpers shared by the stage files (config validation, model lookup, the code each step's
# numbers depend on) and the one list of every model's artifacts.
# The package `infbench` (src/) is installed in the environment by `make setup`.

import os
from pathlib import Path

from infbench import stages
from infbench.core import code_inputs
from infbench.core.capacity_terms import CONCURRENCY_SEARCH_KEYS
from infbench.core.config import ConfigError, canonical, resolve_path, validate_config
from infbench.core.hardware import resolve_dtype

try:
    validate_config(
        config, Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml", Path(workflow.basedir)
    )
except ConfigError as error:
    raise WorkflowError(f"{error}. Edit config/config.yaml (see config/README.md).") from None

# Snakemake compares params by their printed form: sort every mapping's keys so that
# reordering keys in a config file does not rerun anything.
_canonical = canonical(config)
config.clear()
config.update(_canonical)

MODELS = {model["name"]: model for model in config["models"]}
# The software environment for `--software-deployment-method conda`, and the GPUs engine
# rules request from a cluster scheduler (the SLURM executor maps `gpu` to --gpus).
SOFTWARE_ENV = "../../envs/cuda.yaml" if config["hardware"]["device"] == "cuda" else "../../envs/cpu.yaml"
GPUS = 1 if config["hardware"]["device"] == "cuda" else 0
ROUNDS = config["benchmark"]["rounds"]
# How many offline jobs run, and the threshold the comparison applies, do not change what one
# job measures: the measuring rules get the benchmark settings without them, so that changing
# either reruns no measurement.
MEASURED_BENCHMARK = {
    key: value for key, value in config["benchmark"].items() if key not in ("rounds", "agreement_threshold")
}
DTYPE = resolve_dtype(config["hardware"]["dtype"], config["hardware"]["device"])


def repository_file(*parts):
    """A file of this repository as an input, relative to the working directory (absolute
    paths would make results and .snakemake metadata rerun everything once a finished
    project is copied or moved to another path)."""
    return os.path.relpath(Path(workflow.basedir, *parts), Path.cwd())


def script_code(name):
    """The package files the numbers of scripts/{name}.py depend on: its imports, derived
    (infbench.core.code_inputs says which modules never change a number and are left out),
    resolved in this project's own src/infbench, wherever the package was installed from."""
    script = Path(workflow.basedir, "scripts", f"{name}.py")
    package = Path(workflow.basedir, "src", "infbench")
    return [
        repository_file(os.path.relpath(path, Path(workflow.basedir).resolve()))
        for path in code_inputs.script_code(str(script), str(package))
    ]


def category(stage):
    """A stage's category in `snakemake --report`: its report section's number and title, as
    the HTML page shows them (the stage registry says which section)."""
    return stages.section_of(stage).category


def workload_source_file():
    """The user's dataset file or folder (workload.source: dataset) or trace (trace) as the
    workload's input, so that a changed file reruns the workload and what depends on it;
    relative paths are read from the workflow's folder, as a local model's are."""
    source = config["workload"]["source"]
    if source not in ("dataset", "trace"):
        return []
    path = resolve_path(config["workload"][source]["path"], Path(workflow.basedir))
    return os.path.relpath(path, Path.cwd())


def model_spec(wildcards):
    return MODELS[wildcards.model]


def model_download(wildcards):
    """The download a model is built from; a local folder needs none."""
    if MODELS[wildcards.model]["source"] == "local":
        return []
    return expand(rules.download_model.output[0], model=wildcards.model)[0]


def offline_rounds(engine):
    """Every round of one offline engine (benchmark.rounds): round 1 is its main artifact,
    later rounds rerun it in fresh jobs."""
    first, later = {
        "hf": ("results/{model}/hf_baseline.json", "results/{model}/offline_rounds/hf_baseline_{round}.json"),
        "vllm": ("results/{model}/vllm_offline.json", "results/{model}/offline_rounds/vllm_offline_{round}.json"),
    }[engine]
    return [first] + [expand(later, round=number, allow_missing=True)[0] for number in range(2, ROUNDS + 1)]


def interleaved_after(engine, wildcards):
    """What must finish before this round starts: round 1 of both engines (in either order),
    then HF 2, vLLM 2, HF 3, ... Round 1 waits for nothing, so adding rounds reruns nothing."""
    number = int(wildcards.get("round", 1))
    if number == 1:
        return []
    if engine == "vllm":
        previous = [offline_rounds("hf")[number - 1]]
    else:
        previous = [offline_rounds("vllm")[number - 2]] + ([offline_rounds("hf")[0]] if number == 2 else [])
    return expand(previous, model=wildcards.model)


# Whether the serve stage measures users in chat sessions (load.users or load.session_ramp).
SERVE_SESSIONS = bool(config["load"]["users"] or config["load"]["session_ramp"])


def sessions_file(measured):
    """The ShareGPT file of conversations where a stage measures sessions and reads one: an input."""
    source = config["sessions"]["source"]
    return [source] if measured and source != "synthetic" else []


def concurrency_search_config():
    """The capacity settings variants.capacity's searches read; None where it is off."""
    if not config["variants"]["capacity"]:
        return None
    # Only what the searches read (core.capacity_terms.CONCURRENCY_SEARCH_KEYS): no other capacity
    # setting reruns the variants rule.
    return {key: config["capacity"][key] for key in CONCURRENCY_SEARCH_KEYS if key in config["capacity"]}


def search_load():
    """The load settings a capacity search reads (rules capacity, tuning and variants): only
    these, so that changing the sweep's levels reruns none of them."""
    keys = ("burstiness", "warmup", "metrics_interval_s", "slo_ms", "client_processes")
    return {key: config["load"][key] for key in keys}


def stage_config(wildcards, *sections):
    """The config that produced a stage's numbers, recorded in its artifact's provenance."""
    record = {section: MEASURED_BENCHMARK if section == "benchmark" else config[section] for section in sections}
    record["model"] = MODELS[wildcards.model]
    record["resolved_dtype"] = DTYPE
    return record


def stage_rule(stage):
    return getattr(rules, stage.name)


def stage_artifacts(stage, name):
    """{artifact: path} of one stage for one model."""
    outputs = stage_rule(stage).output
    return {
        artifact: expand(outputs[key] if isinstance(key, int) else getattr(outputs, key), model=name)[0]
        for artifact, key in stage.outputs.items()
    }


def model_artifacts(name):
    """{artifact: path} of the artifacts the configured stages produce for one model, from the
    stage registry (infbench/stages.py): the one list that rule `all`, the report rule and its
    script read."""
    return {
        artifact: path
        for stage in stages.running_stages(config)
        for artifact, path in stage_artifacts(stage, name).items()
    }


def utilisation_inputs(wildcards):
    """The artifacts whose decode figures MBU is computed for (stages.utilisation_inputs)."""
    artifacts = model_artifacts(wildcards.model)
    return {name: artifacts[name] for name in stages.utilisation_inputs(config)}


def all_model_artifacts():
    """{model: {artifact: path}} for every configured model, in config order."""
    return {name: model_artifacts(name) for name in MODELS}


def artifact_paths():
    """Every model's artifacts as one list of paths."""
    return [path for artifacts in all_model_artifacts().values() for path in artifacts.values()]


def request_tables():
    """Every model's request tables (stages.Stage.tables), targets of rule `all` beside the artifacts."""
    return [
        expand(getattr(stage_rule(stage).output, key), model=name)[0]
        for name in MODELS
        for stage in stages.running_stages(config)
        for key in stage.tables
    ]


def run_time_records():
    """Snakemake's benchmark files of the measuring stages, shown in the report's provenance."""
    measured = [stage for stage in stages.running_stages(config) if stage.measured]
    return [expand(stage_rule(stage).benchmark, model=name)[0] for name in MODELS for stage in measured]


def final_outputs():
    return artifact_paths() + request_tables() + [rules.html_report.output[0]]
