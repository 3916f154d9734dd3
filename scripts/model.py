"""Rule `model`: resolve one configured model to resources/models/{model}/ with model.json."""

from pathlib import Path

from infbench.logging_setup import rule_logging
from infbench.models import resolve_model

with rule_logging(snakemake.log[0]):
    resolve_model(snakemake.params.spec, Path(snakemake.output[0]), Path(snakemake.params.download_dir))
