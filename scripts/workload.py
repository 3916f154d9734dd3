"""Rule `workload`: the seeded prompt set -> results/{model}/workload.jsonl, the distinct requests
the serving passes draw from -> request_pool.jsonl, and where they came from (source, checksum,
rows read and dropped, API, chat template) -> workload_summary.json."""

from infbench.core.artifacts import write_jsonl
from infbench.core.stage import run_stage
from infbench.workload.requests import Prompts, build_workload, pool_requests, workload_summary


def main(stage):
    from transformers import AutoTokenizer

    params = stage.params
    tokenizer = AutoTokenizer.from_pretrained(stage.input.model)
    requests, source = build_workload(
        tokenizer,
        params.workload,
        max_model_len=params.max_model_len,
        study_max_tokens=params.study_max_tokens,
        seed=params.seed,
        source_path=stage.input.get("source_file"),
    )
    pool = pool_requests(
        Prompts(tokenizer, params.workload.get("api", "completions")),
        params.workload,
        requests,
        max_model_len=params.max_model_len,
        seed=params.seed,
        source_path=stage.input.get("source_file"),
    )
    summary = workload_summary(tokenizer, params.workload, requests, source)
    summary["pool"] = {"requests": len(pool), "requested": params.workload["pool_requests"]}
    inputs = {f"workload.{source['kind']}": source["sha256"]} if "sha256" in source else None
    write_jsonl(stage.output.requests, [request.to_json() for request in requests], schema_name="workload_request")
    write_jsonl(stage.output.pool, [request.to_json() for request in pool], schema_name="workload_request")
    stage.write(stage.output.summary, summary, schema="workload_summary", inputs=inputs)
    print(
        f"wrote {len(requests)} requests to {stage.output.requests} ({source['kind']}, api {summary['api']}) "
        f"and {len(pool)} distinct requests to {stage.output.pool}"
    )


if __name__ == "__main__":
    run_stage(main, snakemake)
