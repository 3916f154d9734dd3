"""Rule `utilisation`: model bandwidth utilisation of each offline scenario and serving level -> utilisation.json."""

from pathlib import Path

from infbench.core import provenance
from infbench.core.artifacts import read_json, write_json
from infbench.core.rule_logging import rule_logging
from infbench.utilisation.mbu import FORMULA, model_bytes, offline_rows, serving_rows


def main(snakemake):
    params = snakemake.params
    started = provenance.now_iso()
    facts = read_json(Path(snakemake.input.model) / "model.json")
    machine = read_json(snakemake.input.machine)["memory_bandwidth"]
    bandwidth = machine["best_bytes_per_s"]
    weight_bytes, kv_per_token = model_bytes(facts, params.dtype)
    rows = []
    for stage in ("hf_baseline", "vllm_offline"):
        if stage in snakemake.input.keys():
            rows += offline_rows(stage, read_json(snakemake.input[stage]), weight_bytes, kv_per_token, bandwidth)
    if "load" in snakemake.input.keys():
        rows += serving_rows(read_json(snakemake.input.load), weight_bytes, kv_per_token, bandwidth)
    write_json(
        snakemake.output[0],
        {
            "model": facts["name"],
            "dtype": params.dtype,
            "weight_bytes": weight_bytes,
            "kv_bytes_per_token": kv_per_token,
            "bandwidth_bytes_per_s": bandwidth,
            "bandwidth_method": machine["method"],
            "formula": FORMULA,
            "rows": rows,
            "provenance": provenance.collect(params.provenance_config, None, started),
        },
        schema_name="utilisation",
    )
    for row in rows:
        print(f"{row['stage']} {row['case']}: MBU {row['mbu'] * 100:.1f} %")


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
