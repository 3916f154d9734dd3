"""Rule `compare_offline`: vLLM / HF ratios, same-model check, study figures -> comparison.json."""

from infbench.artifacts import read_json, read_jsonl, write_json
from infbench.engine_settings import pin_process
from infbench.offline_comparison import compare
from infbench.rule_logging import rule_logging


def main(snakemake):
    params = snakemake.params
    pin_process(params.threads, params.device)  # before torch creates its thread pool

    from infbench.same_model_check import gaps_under_hf

    hf, vllm = read_json(snakemake.input.hf), read_json(snakemake.input.vllm)
    gaps = gaps_under_hf(
        str(snakemake.input.model), params.dtype, read_jsonl(snakemake.input.workload), vllm["greedy_outputs"]
    )
    comparison = compare(hf, vllm, gaps, params.agreement_threshold)
    write_json(snakemake.output[0], comparison, schema_name="comparison")
    for ratio in comparison["ratios"]:
        print(f"{ratio['vllm_scenario']} / {ratio['hf_scenario']}: {ratio['output_throughput']}")
    print(comparison["agreement"]["note"])


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
