"""Rule `serve`: calibrate the client's ceiling on the reference server, start vLLM's
OpenAI-compatible server (or, with server.external, reach the endpoint the user runs), run the
study's request and the load sweep with the openai client -> server.json, load.json and every request in
load.requests.csv."""

from infbench.core.artifacts import read_jsonl
from infbench.core.stage import run_stage
from infbench.engines.external_endpoint import ExternalEndpoint, measured_server
from infbench.engines.server_metrics import server_kv_facts
from infbench.engines.servers import spec_from_params
from infbench.engines.settings import place_client
from infbench.serving.arrivals import replayable, workload_trace
from infbench.serving.client_cost import calibrate, cost_of
from infbench.serving.request_table import level_rows, write_table
from infbench.serving.sessions import session_plan
from infbench.serving.sweep import run_sweep, study_request
from infbench.workload.requests import STUDY_API_PROMPT, has_chat_template


def main(stage):
    params = stage.params
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(stage.model_dir)
    workload = read_jsonl(stage.input.workload)
    pool = read_jsonl(stage.input.pool)
    # load.users and load.session_ramp: their sessions, built before the server starts (a model
    # without a chat template stops here).
    sessions, sessions_source = session_plan(
        params.sessions, stage.model_dir, pool, params.engine["max_model_len"], params.seed, "serve", tokenizer
    )
    spec = spec_from_params(params, stage.model_dir, stage.facts["name"])
    # A fresh server: the study's request below is its first, cold one.
    server = measured_server(spec, params.server["external"], stage.log.server)
    endpoint = server.description() if isinstance(server, ExternalEndpoint) else None
    notes = []
    trace = workload_trace(workload)
    if trace and not replayable(trace):
        notes.append("load.trace_scales: no trace levels, the trace's kept requests all arrive at one instant")
    if params.load["chat_concurrency"] and not has_chat_template(tokenizer):
        notes.append("load.chat_concurrency: no chat levels, the model's tokenizer has no chat template")
    if endpoint:
        server.check()  # a wrong key or address stops the stage now, not after the calibration
    # The client's ceiling on this machine, before the engine starts: the reference server and
    # this client alone (a few seconds).
    ceiling = calibrate(stage.log.calibration)
    with server:
        placement = place_client(params.threads, params.device)
        if endpoint:
            print(f"measuring the external endpoint {server.base_url}; {placement['note']}")
        else:
            print(f"server ready on {server.base_url} after {server.startup_s:.1f} s; {placement['note']}")
        kv = server_kv_facts(server.base_url) if server.metrics else None
        request = study_request(
            base_url=server.base_url,
            model=server.served_name,
            prompt=STUDY_API_PROMPT,
            warm_requests=params.server["warm_requests"],
            seed=params.seed,
            timeout_s=params.server["request_timeout_s"],
            api_key=server.api_key,
        )
        print(f"study request: cold {request['cold']['latency_s']:.2f} s")
        levels = run_sweep(
            server=server,
            workload=workload,
            pool=pool,
            load=params.load,
            seed=params.seed,
            timeout_s=params.server["request_timeout_s"],
            tokenizer=tokenizer,
            prefix_caching=kv["prefix_caching"] if kv else None,
            client_cost=cost_of(ceiling),
            sessions=sessions,
        )
    for note in notes:
        print(f"note: {note}")
    model = stage.facts["name"]
    table = write_table(stage.output.requests, level_rows(levels, params.load["slo_ms"]))
    stage.write(
        stage.output.server,
        {
            "model": model,
            "endpoint": endpoint,
            "startup_s": server.startup_s,
            "host": server.host,
            "command": server.command[1:] if server.command else None,
            "kv": kv,
            "study_request": request,
        },
        schema="server",
    )
    stage.write(
        stage.output.load,
        {
            "model": model,
            "endpoint": endpoint,
            "slo_ms": params.load["slo_ms"],
            "settings": params.load,
            "client_placement": placement,
            "client_ceiling": ceiling,
            "levels": levels,
            "sessions": {**params.sessions, "conversations": sessions_source} if sessions else None,
            "requests_table": table,
            "notes": notes,
        },
        schema="load",
    )


if __name__ == "__main__":
    run_stage(main, snakemake)
