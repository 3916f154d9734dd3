"""Rule `slo_capacity`: the highest concurrency and request rate served within the SLO, found by
bracketing and bisection on a server of the model (or the external endpoint) -> slo_capacity.json."""

from pathlib import Path

from infbench.capacity.slo_capacity import cost_per_million_output_tokens, search_capacity
from infbench.core import provenance
from infbench.core.artifacts import read_json, read_jsonl, write_json
from infbench.core.rule_logging import rule_logging
from infbench.engines.external_endpoint import ExternalEndpoint, measured_server
from infbench.engines.server_metrics import server_kv_facts
from infbench.engines.settings import place_client, server_max_num_seqs
from infbench.engines.vllm_server import raise_on_sigterm


def main(snakemake):
    raise_on_sigterm()
    params = snakemake.params
    started = provenance.now_iso()
    model_dir = Path(snakemake.input.model)
    facts = read_json(model_dir / "model.json")
    workload = read_jsonl(snakemake.input.workload)
    server = measured_server(params, model_dir, facts["name"], snakemake.log.server)
    external = isinstance(server, ExternalEndpoint)
    with server:
        placement = place_client(params.threads, params.device)
        print(f"measuring {server.base_url}; {placement['note']}")
        kv = server_kv_facts(server.base_url) if server.metrics else None
        result = search_capacity(
            server,
            workload,
            params.capacity,
            params.load,
            kv,
            max_model_len=params.engine["max_model_len"],
            max_num_seqs=None if external else server_max_num_seqs(params.engine, params.device),
            seed=params.seed,
            timeout_s=params.server["request_timeout_s"],
        )
    served = result["concurrency"]["at_capacity"]
    throughput = served["output_throughput"]["mean"] if served else None
    write_json(
        snakemake.output[0],
        {
            "model": facts["name"],
            "endpoint": server.description() if external else None,
            "api": workload[0]["api"],
            "slo_ms": params.load["slo_ms"],
            "attainment_target": params.capacity["attainment"],
            "settings": params.capacity,
            "kv": kv,
            **result,
            "cost": {
                "per_hour": params.cost["per_hour"],
                "currency": params.cost["currency"],
                "per_million_output_tokens": cost_per_million_output_tokens(params.cost["per_hour"], throughput),
                "formula": "per_hour / (output tokens/s at the concurrency capacity x 3600) x 10^6",
            },
            "provenance": provenance.collect(params.provenance_config, params.threads, started, params.device),
        },
        schema_name="slo_capacity",
    )


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
