"""Rule `compare_offline`: vLLM / HF ratios, same-model check, study figures -> comparison.json."""

from infbench.artifacts import read_json, read_jsonl, write_json
from infbench.compare import compare, vllm_consistency_gaps
from infbench.engines import pin_process
from infbench.logging_setup import rule_logging

with rule_logging(snakemake.log[0]):
    params = snakemake.params
    pin_process(params.threads, params.device)
    hf, vllm = read_json(snakemake.input.hf), read_json(snakemake.input.vllm)
    gaps = vllm_consistency_gaps(str(snakemake.input.model), params.dtype,
                                 read_jsonl(snakemake.input.workload), vllm["greedy_outputs"])
    comparison = compare(hf, vllm, gaps, params.agreement_threshold)
    write_json(snakemake.output[0], comparison, schema_name="comparison")
    for ratio in comparison["ratios"]:
        print(f"{ratio['vllm_scenario']} / {ratio['hf_scenario']}: {ratio['output_throughput']}")
    print(comparison["agreement"]["note"])
