# SLO capacity: the most requests in flight (and the highest rate, and users in sessions) served
# within the SLO.


rule capacity:
    """The most requests in flight (and the highest rate) served within the SLO, by bracketing
    and bisection on a fresh server, the search seeded by the KV simulator's prediction."""
    output:
        capacity=report(
            "results/{model}/capacity.json",
            category=category("capacity"),
            subcategory="{model}",
            caption="../../report/captions/capacity.rst",
        ),
        # Every probe's requests, one row each (docs/method.md#request-tables).
        requests=report(
            "results/{model}/capacity.requests.csv",
            category=category("capacity"),
            subcategory="{model}",
            caption="../../report/captions/capacity.rst",
        ),
    input:
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        pool=rules.workload.output.pool,
        code=script_code("capacity"),
        # A ShareGPT file of conversations, where the users search reads one.
        sessions=sessions_file(config["sessions"]["capacity"]),
    params:
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
        engine=config["engine"],
        server=config["server"],
        # Only what the search uses, so that changing the sweep's levels does not rerun it.
        load=search_load(),
        capacity=config["capacity"],
        # Only where the users search runs, so that session settings rerun nothing otherwise.
        sessions=config["sessions"] if config["sessions"]["capacity"] else None,
        cost=config["cost"],
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(
            wildcards,
            "hardware",
            "engine",
            "server",
            "capacity",
            *(["sessions"] if config["sessions"]["capacity"] else []),
            "cost",
            "seed",
        ),
    threads: config["hardware"]["threads"]
    resources:
        bench_slot=1,
        gpu=GPUS,
        mem_mb=16000,
        runtime=120,
    conda:
        SOFTWARE_ENV
    log:
        rule="logs/capacity/{model}.log",
        server="logs/capacity/{model}.server.log",
    benchmark:
        "benchmarks/{model}/capacity.tsv"
    script:
        "../../scripts/capacity.py"
