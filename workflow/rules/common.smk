# Helpers shared by the stage files (config validation, model lookup, the code each step's
# numbers depend on) and the one list of every model's artifacts.
# The package `infbench` (src/) is installed in the environment by `make setup`.

import os
from pathlib import Path

from infbench.config import ConfigError, canonical, resolve_path, validate_config
from infbench.hardware import resolve_dtype

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
# server.external: the serve stage and the SLO capacity search measure the user's endpoint. The
# stages that start their own server of the local model (client fidelity, tuning, prefix caching,
# the live paging study) or predict its KV cache from this config's engine (the KV check) would
# not describe that endpoint, so they do not run.
EXTERNAL = config["server"]["external"] is not None
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


# The package modules each step declares as inputs, so that changing them reruns it, are exactly
# the modules that compute, select or time the rule's numbers, and everything they import
# from the package. Not declared anywhere, because they never change a number: how
# artifacts are validated and written (artifacts.py, schemas/), provenance (provenance.py,
# hardware.py's probes; the dtype the workflow resolves is a param), errors and logging
# (errors.py, rule_logging.py) and config checks (config.py). A change to those modules
# reruns nothing; rerun with --forcerun where an old artifact must gain a new field.
# tests/test_workflow.py checks each rule's list against its script's imports.
def package_modules(*names):
    return [repository_file("src", "infbench", f"{name}.py") for name in names]


def workload_dataset():
    """The user's dataset file or folder (workload.source: dataset) as the workload's input, so
    that a changed file reruns the workload and what depends on it; relative paths are read
    from the workflow's folder, as a local model's are."""
    if config["workload"]["source"] != "dataset":
        return []
    path = resolve_path(config["workload"]["dataset"]["path"], Path(workflow.basedir))
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


def stage_config(wildcards, *sections):
    """The config that produced a stage's numbers, recorded in its artifact's provenance."""
    record = {section: MEASURED_BENCHMARK if section == "benchmark" else config[section] for section in sections}
    record["model"] = MODELS[wildcards.model]
    record["resolved_dtype"] = DTYPE
    return record


def model_artifacts(name):
    """{stage: path} of the artifacts the configured stages produce for one model: the one
    list that rule `all`, the report rule and its script read."""
    stages = {
        "model": rules.model.output[0],
        "workload": rules.workload.output.requests,
        "workload_summary": rules.workload.output.summary,
    }
    if config["hf_baseline"]["enabled"]:
        stages["hf_baseline"] = rules.hf_baseline.output[0]
    if config["vllm_offline"]["enabled"]:
        stages["vllm_offline"] = rules.vllm_offline.output[0]
        stages["allocator"] = rules.allocator.output[0]
    if config["hf_baseline"]["enabled"] and config["vllm_offline"]["enabled"]:
        stages["comparison"] = rules.compare_offline.output[0]
    if config["server"]["enabled"]:
        stages["server"] = rules.serve.output.server
        stages["load"] = rules.serve.output.load
        if not EXTERNAL:
            stages["kv_validation"] = rules.kv_validation.output[0]
    if config["client_fidelity"]["enabled"] and not EXTERNAL:
        stages["client_fidelity"] = rules.client_fidelity.output[0]
    if config["tuning"]["enabled"] and not EXTERNAL:
        stages["tuning"] = rules.tuning.output[0]
    if config["prefix_caching"]["enabled"] and not EXTERNAL:
        stages["prefix_caching"] = rules.prefix_caching.output[0]
    if config["capacity"]["enabled"] and config["server"]["enabled"]:
        stages["slo_capacity"] = rules.slo_capacity.output[0]
    if config["paging_live"]["enabled"] and not EXTERNAL:
        stages["paging_live"] = rules.paging_live.output[0]
    if utilisation_inputs(name):
        stages["utilisation"] = rules.utilisation.output[0]
    return {stage: expand(path, model=name)[0] for stage, path in stages.items()}


def utilisation_inputs(wildcards):
    """The artifacts whose decode figures MBU is computed for: the offline engines, and the load
    sweep of this pipeline's server (an external endpoint runs on another machine)."""
    name = wildcards if isinstance(wildcards, str) else wildcards.model
    inputs = {}
    if config["hf_baseline"]["enabled"]:
        inputs["hf_baseline"] = rules.hf_baseline.output[0]
    if config["vllm_offline"]["enabled"]:
        inputs["vllm_offline"] = rules.vllm_offline.output[0]
    if config["server"]["enabled"] and not EXTERNAL:
        inputs["load"] = rules.serve.output.load
    return {key: expand(path, model=name)[0] for key, path in inputs.items()}


def all_model_artifacts():
    """{model: {stage: path}} for every configured model, in config order."""
    return {name: model_artifacts(name) for name in MODELS}


def artifact_paths():
    """Every model's artifacts as one list of paths."""
    return [path for artifacts in all_model_artifacts().values() for path in artifacts.values()]


def run_time_records():
    """Snakemake's benchmark files of the measuring rules, shown in the report's provenance."""
    measuring = [
        (config["hf_baseline"]["enabled"], rules.hf_baseline),
        (config["vllm_offline"]["enabled"], rules.vllm_offline),
        (config["server"]["enabled"], rules.serve),
        (config["client_fidelity"]["enabled"] and not EXTERNAL, rules.client_fidelity),
        (config["tuning"]["enabled"] and not EXTERNAL, rules.tuning),
        (config["prefix_caching"]["enabled"] and not EXTERNAL, rules.prefix_caching),
        (config["capacity"]["enabled"] and config["server"]["enabled"], rules.slo_capacity),
        (config["paging_live"]["enabled"] and not EXTERNAL, rules.paging_live),
    ]
    return [expand(measured.benchmark, model=name)[0] for name in MODELS for enabled, measured in measuring if enabled]


def final_outputs():
    return artifact_paths() + [rules.html_report.output[0]]
