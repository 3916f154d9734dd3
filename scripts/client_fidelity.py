"""Rule `client_fidelity`: on a fresh server of the model, let vLLM's benchmark client and ours
take turns with the same work -> client_fidelity.json."""

from infbench.core.artifacts import read_jsonl, write_text_atomic
from infbench.core.stage import run_stage
from infbench.engines.servers import spec_from_params
from infbench.serving.client import cycle_requests
from infbench.serving.client_fidelity import fidelity_checks, fidelity_ratios, measure_client_fidelity


def main(stage):
    params = stage.params
    fidelity = params.client_fidelity
    workload = read_jsonl(stage.input.workload)
    requests = cycle_requests(workload, fidelity["requests"])
    for request in requests:
        request.max_tokens = fidelity["output_tokens"]
    measured = measure_client_fidelity(
        spec_from_params(params, stage.model_dir.resolve(), stage.facts["name"]),
        stage.log.server,
        requests,
        concurrency=fidelity["concurrency"],
        rounds=fidelity["rounds"],
        interval_s=params.metrics_interval_s,
        timeout_s=params.server["request_timeout_s"],
        api=workload[0]["api"],
    )
    write_text_atomic(stage.output.vllm_result, measured["vllm_result"])
    ratios = fidelity_ratios(measured["rounds"])
    stage.write(
        stage.output.fidelity,
        {
            "model": stage.facts["name"],
            "settings": fidelity,
            "vllm_bench_arguments": measured["arguments"],
            "client_placement": measured["placement"],
            "rounds": measured["rounds"],
            "ratios": ratios,
            "checks": fidelity_checks(measured["rounds"], ratios),
        },
        schema="client_fidelity",
    )


if __name__ == "__main__":
    run_stage(main, snakemake)
