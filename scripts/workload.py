"""Rule `workload`: the seeded prompt set -> results/{model}/workload.jsonl."""

from infbench.artifacts import write_jsonl
from infbench.rule_logging import rule_logging
from infbench.workload import build_workload


def main(snakemake):
    from transformers import AutoTokenizer

    params = snakemake.params
    requests = build_workload(
        AutoTokenizer.from_pretrained(snakemake.input.model),
        params.workload,
        max_model_len=params.max_model_len,
        study_max_tokens=params.study_max_tokens,
        seed=params.seed,
    )
    write_jsonl(snakemake.output[0], [request.to_json() for request in requests], schema_name="workload_request")
    print(f"wrote {len(requests)} requests to {snakemake.output[0]}")


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
