"""Rule `report`: merge every artifact into results/report.html."""

from pathlib import Path

from infbench.artifacts import read_json, read_jsonl, write_text_atomic
from infbench.logging_setup import rule_logging
from infbench.report import build_context, render

with rule_logging(snakemake.log[0]):
    models = {}
    for path in map(Path, snakemake.input.artifacts):
        if path.is_dir():  # a model folder: its facts
            models.setdefault(path.name, {})["model"] = read_json(path / "model.json")
            continue
        model = path.parts[-2]
        models.setdefault(model, {})[path.stem] = read_jsonl(path) if path.suffix == ".jsonl" else read_json(path)
    ordered = {name: models[name] for name in snakemake.params.models}
    html = render(build_context(ordered, snakemake.params.config, list(snakemake.input.benchmarks)))
    write_text_atomic(snakemake.output[0], html)
    print(f"wrote {snakemake.output[0]} ({len(html) / 1024:.0f} KiB)")
