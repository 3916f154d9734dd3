"""Rule `run_comparison` (workflow/run_comparison/Snakefile): the runs, however they were fetched -> the
comparison page and its JSON."""

from infbench.core.rule_logging import rule_logging
from infbench.runs.command import verdict_counts, write_comparison


def main(snakemake):
    record, _ = write_comparison(
        list(snakemake.input.runs),
        sources=list(snakemake.params.sources),
        html=snakemake.output.html,
        json_path=snakemake.output.json,
        template=snakemake.input.template,
        threshold=snakemake.params.threshold,
        labels=snakemake.params.labels,
    )
    print("\n".join(verdict_counts(record)))


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
