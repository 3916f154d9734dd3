"""Rule `workload`: the seeded prompt set -> results/{model}/workload.jsonl, and where it came
from (source, checksum, rows read and dropped, API, chat template) -> workload_summary.json."""

from infbench.core import provenance
from infbench.core.artifacts import write_json, write_jsonl
from infbench.core.rule_logging import rule_logging
from infbench.workload.requests import build_workload, workload_summary


def main(snakemake):
    from transformers import AutoTokenizer

    params = snakemake.params
    started = provenance.now_iso()
    tokenizer = AutoTokenizer.from_pretrained(snakemake.input.model)
    requests, source = build_workload(
        tokenizer,
        params.workload,
        max_model_len=params.max_model_len,
        study_max_tokens=params.study_max_tokens,
        seed=params.seed,
        dataset_path=snakemake.input.get("dataset"),
    )
    summary = workload_summary(tokenizer, params.workload, requests, source)
    inputs = {"workload.dataset": source["sha256"]} if "sha256" in source else None
    summary["provenance"] = provenance.collect(params.provenance_config, None, started, inputs=inputs)
    write_jsonl(snakemake.output.requests, [request.to_json() for request in requests], schema_name="workload_request")
    write_json(snakemake.output.summary, summary, schema_name="workload_summary")
    print(f"wrote {len(requests)} requests to {snakemake.output.requests} ({source['kind']}, api {summary['api']})")


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
