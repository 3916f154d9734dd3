"""Rule `utilisation`: model bandwidth utilisation of each offline scenario and serving level -> utilisation.json."""

from infbench.core.artifacts import read_json
from infbench.core.stage import run_stage
from infbench.utilisation.mbu import FORMULA, model_bytes, offline_rows, reference_bandwidth, serving_rows


def main(stage):
    params = stage.params
    facts = stage.facts
    bandwidth, method, kernels = reference_bandwidth(read_json(stage.input.machine)["memory_bandwidth"])
    weight_bytes, kv_per_token = model_bytes(facts, params.dtype)
    rows = []
    for offline in ("hf_baseline", "vllm_offline"):
        if offline in stage.input.keys():
            rows += offline_rows(offline, read_json(stage.input[offline]), weight_bytes, kv_per_token, bandwidth)
    if "load" in stage.input.keys():
        rows += serving_rows(read_json(stage.input.load), weight_bytes, kv_per_token, bandwidth)
    stage.write(
        stage.output[0],
        {
            "model": facts["name"],
            "dtype": params.dtype,
            "weight_bytes": weight_bytes,
            "kv_bytes_per_token": kv_per_token,
            "bandwidth_bytes_per_s": bandwidth,
            "bandwidth_method": method,
            "bandwidth_by_kernel": kernels,
            "formula": FORMULA,
            "rows": rows,
        },
        schema="utilisation",
    )
    for row in rows:
        print(f"{row['stage']} {row['case']}: MBU {row['mbu'] * 100:.1f} %")


if __name__ == "__main__":
    run_stage(main, snakemake)
