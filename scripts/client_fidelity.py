"""Rule `client_fidelity`: start vLLM's server, let vLLM's benchmark client and ours take turns
on it with the same work, stop it -> client_fidelity.json."""

import tempfile
from pathlib import Path

from infbench.core import provenance
from infbench.core.artifacts import read_json, read_jsonl, write_json, write_text_atomic
from infbench.core.rule_logging import rule_logging
from infbench.engines.settings import engine_env, place_client, vllm_engine_args
from infbench.engines.vllm_server import VLLMServer, raise_on_sigterm
from infbench.serving.client import cycle_requests
from infbench.serving.client_fidelity import (
    VLLM_RESULT,
    alternate,
    fidelity_checks,
    fidelity_ratios,
    run_ours,
    run_vllm_bench,
    vllm_bench_arguments,
    write_dataset,
)


def main(snakemake):
    raise_on_sigterm()
    params = snakemake.params
    fidelity = params.client_fidelity
    started = provenance.now_iso()
    model_dir = Path(snakemake.input.model).resolve()
    facts = read_json(model_dir / "model.json")
    workload = read_jsonl(snakemake.input.workload)
    api = workload[0]["api"]
    requests = cycle_requests(workload, fidelity["requests"])
    for request in requests:
        request.max_tokens = fidelity["output_tokens"]
    engine_args = vllm_engine_args(model_dir, params.dtype, params.engine, params.seed, params.device)
    server = VLLMServer(
        engine_args,
        facts["name"],
        snakemake.log.server,
        env=engine_env(params.threads, params.device),
        startup_timeout_s=params.server["startup_timeout_s"],
    )
    with tempfile.TemporaryDirectory() as scratch, server:
        placement = place_client(params.threads, params.device)
        print(f"server ready on {server.base_url} after {server.startup_s:.1f} s; {placement['note']}")
        dataset = Path(scratch) / "prompts.jsonl"
        write_dataset(requests, dataset, api)
        arguments = vllm_bench_arguments(
            base_url=server.base_url,
            served_name=server.served_name,
            tokenizer_dir=model_dir,
            dataset=dataset,
            count=len(requests),
            concurrency=fidelity["concurrency"],
            seed=params.seed,
            result_dir=Path(scratch),
            api=api,
        )
        rounds = alternate(
            lambda: run_ours(
                base_url=server.base_url,
                served_name=server.served_name,
                requests=requests,
                concurrency=fidelity["concurrency"],
                seed=params.seed,
                interval_s=params.metrics_interval_s,
                timeout_s=params.server["request_timeout_s"],
                api=api,
            ),
            lambda: run_vllm_bench(arguments, Path(scratch)),
            fidelity["rounds"],
        )
        write_text_atomic(snakemake.output.vllm_result, (Path(scratch) / VLLM_RESULT).read_text())
    ratios = fidelity_ratios(rounds)
    write_json(
        snakemake.output.fidelity,
        {
            "model": facts["name"],
            "settings": fidelity,
            "vllm_bench_arguments": arguments,
            "client_placement": placement,
            "rounds": rounds,
            "ratios": ratios,
            "checks": fidelity_checks(rounds, ratios),
            "provenance": provenance.collect(params.provenance_config, params.threads, started, params.device),
        },
        schema_name="client_fidelity",
    )


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
