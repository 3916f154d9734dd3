# Helpers shared by every rule file: config validation, model lookup, and the list of
# package modules a rule imports (declared as inputs so code changes trigger reruns).

import os
import sys
from pathlib import Path

SRC_DIR = Path(workflow.basedir) / "src"
sys.path.insert(0, str(SRC_DIR))
# Rule scripts run in their own Python process: they find the package through PYTHONPATH.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC_DIR), os.environ.get("PYTHONPATH")]))

from infbench.config import ConfigError, resolve_dtype, validate_config

try:
    validate_config(config, Path(workflow.basedir))
except ConfigError as error:
    raise WorkflowError(f"{error}. Edit config/config.yaml (see config/README.md).") from None

MODELS = {model["name"]: model for model in config["models"]}
DTYPE = resolve_dtype(config["hardware"]["dtype"], config["hardware"]["device"])


wildcard_constraints:
    model="|".join(map(re.escape, MODELS)),


def package_modules(*names):
    """The package files a rule's script imports, as inputs: Snakemake tracks script files only."""
    return [str(SRC_DIR / "infbench" / f"{name}.py") for name in ("__init__", "artifacts", "provenance", *names)]


def model_spec(wildcards):
    return MODELS[wildcards.model]


def final_outputs():
    outputs = []
    for name in MODELS:
        outputs += [f"resources/models/{name}/model.json", f"results/{name}/workload.jsonl"]
    return outputs
