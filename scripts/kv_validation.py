"""Rule `kv_validation`: the blocks the requests in flight held, by the simulator's arithmetic,
against the server's scraped KV usage over every load level's time series -> kv_validation.json."""

from infbench.core.artifacts import read_json
from infbench.core.stage import run_stage
from infbench.kv.validation import live_validation


def main(stage):
    server, load = read_json(stage.input.server), read_json(stage.input.load)
    validation = live_validation(load, server["kv"])
    validation["model"] = server["model"]
    stage.write(stage.output[0], validation, schema="kv_validation")
    print(f"live KV validation: {validation['status']} ({validation['detail']})")


if __name__ == "__main__":
    run_stage(main, snakemake)
