"""Rule `workload`: write results/{model}/workload.jsonl."""

from transformers import AutoTokenizer

from infbench.artifacts import write_jsonl
from infbench.logging_setup import rule_logging
from infbench.workload import build_workload

with rule_logging(snakemake.log[0]):
    tokenizer = AutoTokenizer.from_pretrained(snakemake.input.model)
    requests = build_workload(
        tokenizer,
        snakemake.params.workload,
        max_model_len=snakemake.params.max_model_len,
        study_max_tokens=snakemake.params.study_max_tokens,
        seed=snakemake.params.seed,
    )
    write_jsonl(snakemake.output[0], [request.to_json() for request in requests], schema_name="workload_request")
    print(f"wrote {len(requests)} requests to {snakemake.output[0]}")
