"""Rule `html_report`: every artifact, through the declared template -> results/report.html. The
template's partials, macros and stylesheet load from its folder (report/); the rule declares
them all, so that an edit to any reruns it."""

from infbench.core.artifacts import load_model_artifacts, write_text_atomic
from infbench.core.rule_logging import rule_logging
from infbench.report import build_context, render


def main(snakemake):
    models = {model: load_model_artifacts(paths) for model, paths in snakemake.params.artifacts.items()}
    context = build_context(models, snakemake.params.config, list(snakemake.input.run_times))
    html = render(context, snakemake.input.template)
    write_text_atomic(snakemake.output[0], html)
    print(f"wrote {snakemake.output[0]} ({len(html) / 1024:.0f} KiB)")


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
