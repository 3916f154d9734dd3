"""Rule `capacity`: the highest concurrency and request rate (and, with sessions.capacity, users
in chat sessions) served within the SLO, found by bracketing and bisection on a fresh server of
the model (or the external endpoint), capacity.runs times, each run on a server started for it
-> capacity.json and every probe's requests in capacity.requests.csv."""

import os

from infbench.capacity.checks import capacity_checks
from infbench.capacity.measure import cost_per_million_output_tokens, search_capacity, search_runs
from infbench.core.artifacts import read_jsonl
from infbench.core.stage import run_stage
from infbench.engines.external_endpoint import measured_server
from infbench.engines.servers import spec_from_params
from infbench.engines.settings import pin_threads, place_client, server_max_num_seqs
from infbench.serving.request_table import write_table
from infbench.serving.sessions import session_plan


def run_log(path: str, run: int) -> str:
    """The server log of run `run` (from 1): the rule's own for the first, beside it for others."""
    return path if run == 1 else path.removesuffix(".log") + f".run{run}.log"


def main(stage):
    params = stage.params
    workload = read_jsonl(stage.input.workload)
    pool = read_jsonl(stage.input.pool)
    spec = spec_from_params(params, stage.model_dir, stage.facts["name"])
    external = bool(params.server["external"])
    # Read before the server starts: importing vLLM's defaults takes seconds of CPU.
    max_num_seqs = None if external else server_max_num_seqs(params.engine)
    cpus = os.sched_getaffinity(0)
    sessions, sessions_source = session_plan(
        params.sessions, stage.model_dir, pool, params.engine["max_model_len"], params.seed, "capacity"
    )

    def new_server(run: int):
        pin_threads(cpus)  # each server sees, binds to and inherits the CPUs the stage was given
        return measured_server(spec, params.server["external"], run_log(stage.log.server, run))

    def search_on(server, kv):
        # After the server has started: the client keeps off the engine's cores.
        print(f"measuring {server.base_url}; {place_client(params.threads, params.device)['note']}")
        return search_capacity(
            server,
            workload,
            pool,
            params.capacity,
            params.load,
            kv,
            max_model_len=params.engine["max_model_len"],
            max_num_seqs=max_num_seqs["value"] if max_num_seqs else None,
            seed=params.seed,
            timeout_s=params.server["request_timeout_s"],
            sessions=sessions,
            max_users=params.sessions["max_users"] if sessions else 0,
            session_rate=bool(sessions) and params.sessions["rate"],
        )

    result = search_runs(params.capacity["runs"], new_server, search_on)
    kv = result.pop("kv")
    table = write_table(stage.output.requests, result.pop("requests"))
    served = result["concurrency"]["at_capacity"]
    throughput = served["output_throughput"]["mean"] if served else None
    stage.write(
        stage.output.capacity,
        {
            "model": stage.facts["name"],
            "endpoint": measured_server(spec, params.server["external"], stage.log.server).description()
            if external
            else None,
            "api": workload[0]["api"],
            "slo_ms": params.load["slo_ms"],
            "attainment_target": params.capacity["attainment"],
            "settings": params.capacity,
            "sessions": {
                **params.sessions,
                "conversations": sessions_source,
                # The endpoint's own where it is external: not known here.
                "prefix_caching": None if external else bool(params.engine.get("enable_prefix_caching")),
            }
            if sessions
            else None,
            "kv": kv,
            "max_num_seqs": max_num_seqs,
            **result,
            "cost": {
                "per_hour": params.cost["per_hour"],
                "currency": params.cost["currency"],
                "per_million_output_tokens": cost_per_million_output_tokens(params.cost["per_hour"], throughput),
                "formula": "per_hour / (output tokens/s at the concurrency capacity x 3600) x 10^6",
            },
            "checks": capacity_checks(result),
            "requests_table": table,
        },
        schema="capacity",
    )


if __name__ == "__main__":
    run_stage(main, snakemake)
