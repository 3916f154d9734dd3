"""Rule `offline_comparison`: vLLM / HF ratios, like-for-like checks, same-model check, study
figures -> offline_comparison.json."""

from infbench.core.artifacts import read_json, read_jsonl, write_json
from infbench.core.stage import run_stage
from infbench.engines.settings import pin_process
from infbench.offline.comparison import compare


def main(stage):
    params = stage.params
    pin_process(params.threads, params.device)  # before torch creates its thread pool

    from infbench.offline.same_weights import gaps_under_hf

    hf_rounds = [read_json(path) for path in stage.input.hf]
    vllm_rounds = [read_json(path) for path in stage.input.vllm]
    gaps = gaps_under_hf(
        str(stage.input.model),
        params.dtype,
        params.device,
        read_jsonl(stage.input.workload),
        vllm_rounds[0]["greedy_outputs"],
    )
    comparison = compare(
        hf_rounds,
        vllm_rounds,
        gaps,
        agreement_threshold=params.agreement_threshold,
        device=params.device,
        dtype=params.dtype,
    )
    write_json(stage.output[0], comparison, schema_name="offline_comparison")
    for ratio in comparison["ratios"]:
        print(f"{ratio['vllm_scenario']} / {ratio['hf_scenario']}: {ratio['output_throughput']}")
    for item in comparison["checks"]:
        print(f"{item['status']}: {item['name']}: {item['detail']}")


if __name__ == "__main__":
    run_stage(main, snakemake)
