# Helpers shared by the rule files, namely config validation, model lookup, and the list of
# package modules a rule imports (declared as inputs so code changes trigger reruns).
# The package `infbench` (src/) is installed editable in the environment by `make setup`.

from pathlib import Path

SRC_DIR = Path(workflow.basedir) / "src"
REPORT_TEMPLATE = str(Path(workflow.basedir) / "report" / "report.html.j2")

from infbench.config import ConfigError, canonical, resolve_dtype, validate_config

try:
    validate_config(config, Path(workflow.basedir))
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
DTYPE = resolve_dtype(config["hardware"]["dtype"], config["hardware"]["device"])


def package_modules(*names):
    """The package files a rule's script imports, as inputs: Snakemake tracks script files only."""
    return [str(SRC_DIR / "infbench" / f"{name}.py") for name in ("__init__", "artifacts", "provenance", *names)]


def model_spec(wildcards):
    return MODELS[wildcards.model]


def stage_config(wildcards, *sections):
    """The config that produced a stage's numbers, recorded in its artifact's provenance."""
    record = {section: config[section] for section in sections}
    record["model"] = MODELS[wildcards.model]
    record["resolved_dtype"] = DTYPE
    return record


def server_outputs():
    """Named inputs for rules that use the server's results when the server stage is on."""
    if not config["server"]["enabled"]:
        return {}
    return {"server": "results/{model}/server.json", "load": "results/{model}/load.json"}


def stage_artifacts(name):
    """The JSON artifacts of one model that the configured stages produce."""
    artifacts = [f"resources/models/{name}", f"results/{name}/workload.jsonl"]
    if config["hf_baseline"]["enabled"]:
        artifacts.append(f"results/{name}/hf_baseline.json")
    if config["vllm_offline"]["enabled"]:
        artifacts += [f"results/{name}/vllm_offline.json", f"results/{name}/allocator.json"]
    if config["hf_baseline"]["enabled"] and config["vllm_offline"]["enabled"]:
        artifacts.append(f"results/{name}/comparison.json")
    if config["server"]["enabled"]:
        artifacts += [f"results/{name}/server.json", f"results/{name}/load.json"]
    if config["tuning"]["enabled"]:
        artifacts.append(f"results/{name}/tuning.json")
    return artifacts


def report_artifacts():
    return [path for name in MODELS for path in stage_artifacts(name)]


def report_benchmarks():
    """Snakemake's run-time records of the measuring rules, shown in the report's provenance."""
    rules = [("hf_baseline", "hf_baseline"), ("vllm_offline", "vllm_offline"), ("server", "serve"), ("tuning", "tuning")]
    return [f"benchmarks/{name}/{rule}.tsv" for name in MODELS for section, rule in rules
            if config[section]["enabled"]]


def final_outputs():
    return report_artifacts() + ["results/report.html"]
