"""Rule `kv_validation`: the blocks the requests in flight held, by the simulator's arithmetic,
against the server's scraped KV usage over every load level's time series -> kv_validation.json."""

from infbench.core import provenance
from infbench.core.artifacts import read_json, write_json
from infbench.core.rule_logging import rule_logging
from infbench.kv.validation import live_validation


def main(snakemake):
    params = snakemake.params
    started = provenance.now_iso()
    server, load = read_json(snakemake.input.server), read_json(snakemake.input.load)
    validation = live_validation(load, server["kv"])
    validation["model"] = server["model"]
    validation["provenance"] = provenance.collect(params.provenance_config, None, started)
    write_json(snakemake.output[0], validation, schema_name="kv_validation")
    print(f"live KV validation: {validation['status']} ({validation['detail']})")


if __name__ == "__main__":
    with rule_logging(snakemake.log[0]):
        main(snakemake)
