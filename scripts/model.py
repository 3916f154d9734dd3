"""Rule `model`: the download (or a local folder) -> resources/models/{model}/ with model.json."""

from pathlib import Path

from infbench.core.stage import run_stage
from infbench.model.folder import resolve_model


def main(stage):
    download = Path(stage.input.download) if stage.input.download else None
    facts = resolve_model(stage.params.spec, Path(stage.output[0]), download)
    print(f"{facts.name}: {facts.parameters:,} parameters, {facts.num_layers} layers")


if __name__ == "__main__":
    run_stage(main, snakemake)
