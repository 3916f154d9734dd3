"""Rule `kv_validation`: the blocks the requests in flight held, by the simulator's allocation
rule (on demand, and reservation as its rival), against the server's scraped KV usage over every
load level's time series -> kv_validation.json."""

from infbench.core.artifacts import read_json, read_jsonl
from infbench.core.stage import run_stage
from infbench.kv.validation import live_validation, request_prefixes


def main(stage):
    server, load = read_json(stage.input.server), read_json(stage.input.load)
    kv = server["kv"]
    prefixes, counts = None, None
    if kv["prefix_caching"]:
        # Shared blocks are held once: which requests share them follows from their tokens.
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(stage.model_dir)
        sources = read_jsonl(stage.input.workload) + read_jsonl(stage.input.pool)  # levels draw from the pool
        prefixes, counts = request_prefixes(tokenizer, sources, load, kv["block_size"])
        print(f"prefix caching on: {counts['matched']} requests re-tokenized as served, {counts['unmatched']} not")
    validation = live_validation(load, kv, prefixes, counts["unmatched"] if counts else 0)
    validation["model"] = server["model"]
    if counts is not None:
        validation["prefix_requests"] = counts
    stage.write(stage.output[0], validation, schema="kv_validation")
    for item in validation["checks"]:
        print(f"{item['status']}: {item['name']}: {item['detail']}")


if __name__ == "__main__":
    run_stage(main, snakemake)
