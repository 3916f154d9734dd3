"""Rule `model`: the download (or a local folder) -> resources/models/{model}/ with model.json."""

from pathlib import Path

from infbench.core.rule_logging import rule_logging
from infbench.model.folder import resolve_model


def main(snakemake):
    download = Path(snakemake.input.download) if snakemake.input.download else None
    facts = resolve_model(snakemake.params.spec, Path(snakemake.output[0]), download)
    print(f"{facts.name}: {facts.parameters:,} parameters, {facts.num_layers} layers")


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
