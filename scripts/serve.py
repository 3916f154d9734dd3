"""Rule `serve`: start vLLM's OpenAI-compatible server, run the study's request and the load
sweep with the openai client, stop the server -> server.json and load.json."""

from pathlib import Path

from infbench import provenance
from infbench.artifacts import read_json, read_jsonl, write_json
from infbench.engine_settings import engine_env, place_client, vllm_engine_args
from infbench.load_sweep import run_sweep, study_request
from infbench.rule_logging import rule_logging
from infbench.server_metrics import server_kv_facts
from infbench.vllm_server import VLLMServer, raise_on_sigterm
from infbench.workload import STUDY_API_PROMPT


def main(snakemake):
    raise_on_sigterm()
    params = snakemake.params
    started = provenance.now_iso()
    from transformers import AutoTokenizer

    model_dir = Path(snakemake.input.model)
    facts = read_json(model_dir / "model.json")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    workload = read_jsonl(snakemake.input.workload)
    engine_args = vllm_engine_args(model_dir, params.dtype, params.engine, params.seed, params.device)
    server = VLLMServer(
        engine_args,
        facts["name"],
        snakemake.log.server,
        env=engine_env(params.threads, params.device),
        startup_timeout_s=params.server["startup_timeout_s"],
    )
    with server:
        placement = place_client(params.threads, params.device)
        print(f"server ready on {server.base_url} after {server.startup_s:.1f} s; {placement['note']}")
        kv = server_kv_facts(server.base_url)
        request = study_request(
            base_url=server.base_url,
            model=facts["name"],
            prompt=STUDY_API_PROMPT,
            warm_requests=params.server["warm_requests"],
            seed=params.seed,
            timeout_s=params.server["request_timeout_s"],
        )
        print(f"study request: cold {request['cold']['latency_s']:.2f} s")
        levels = run_sweep(
            server=server,
            workload=workload,
            load=params.load,
            seed=params.seed,
            timeout_s=params.server["request_timeout_s"],
            tokenizer=tokenizer,
            prefix_caching=params.engine["enable_prefix_caching"],
        )
    record = provenance.collect(params.provenance_config, params.threads, started, params.device)
    write_json(
        snakemake.output.server,
        {
            "model": facts["name"],
            "startup_s": server.startup_s,
            "host": server.host,
            "command": server.command[1:],
            "kv": kv,
            "study_request": request,
            "provenance": record,
        },
        schema_name="server",
    )
    write_json(
        snakemake.output.load,
        {
            "model": facts["name"],
            "slo_ms": params.load["slo_ms"],
            "settings": params.load,
            "client_placement": placement,
            "levels": levels,
            "provenance": record,
        },
        schema_name="load",
    )


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
