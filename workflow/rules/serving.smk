# The OpenAI-compatible server under load, client fidelity, tuning, prefix caching and variants: each
# stage starts its own fresh servers and stops them before it ends.


rule serve:
    """The client's ceiling calibrated on the reference server; vLLM's OpenAI-compatible server
    measured under load."""
    output:
        server=report(
            "results/{model}/server.json",
            category=category("serve"),
            subcategory="{model}",
            caption="../../report/captions/serve.rst",
        ),
        load=report(
            "results/{model}/load.json",
            category=category("serve"),
            subcategory="{model}",
            caption="../../report/captions/serve.rst",
        ),
        # Every request of every level, one row each (docs/method.md#request-tables).
        requests=report(
            "results/{model}/load.requests.csv",
            category=category("serve"),
            subcategory="{model}",
            caption="../../report/captions/serve.rst",
        ),
    input:
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        pool=rules.workload.output.pool,
        code=script_code("serve"),
        # A ShareGPT file of conversations, where load.users or load.session_ramp reads one.
        sessions=sessions_file(SERVE_SESSIONS),
    params:
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
        engine=config["engine"],
        server=config["server"],
        load=config["load"],
        # Only where the stage measures sessions, so that session settings rerun nothing otherwise.
        sessions=config["sessions"] if SERVE_SESSIONS else None,
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(
            wildcards,
            "hardware",
            "engine",
            "server",
            "load",
            *(["sessions"] if SERVE_SESSIONS else []),
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
        rule="logs/serve/{model}.log",
        server="logs/serve/{model}.server.log",
        calibration="logs/serve/{model}.calibration.log",
    benchmark:
        "benchmarks/{model}/serve.tsv"
    script:
        "../../scripts/serve.py"


rule client_fidelity:
    """vLLM's own benchmark client and this pipeline's take turns on one server with the same work."""
    output:
        fidelity=report(
            "results/{model}/client_fidelity.json",
            category=category("client_fidelity"),
            subcategory="{model}",
            caption="../../report/captions/serve.rst",
        ),
        # vLLM's own result file of the last round, as `vllm bench serve --save-result` wrote it:
        # it can sit in a run comparison (scripts/runs.py compare) beside this pipeline's runs.
        vllm_result="results/{model}/client_fidelity/vllm_bench.json",
    input:
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        code=script_code("client_fidelity"),
    params:
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
        engine=config["engine"],
        server=config["server"],
        client_fidelity=config["client_fidelity"],
        metrics_interval_s=config["load"]["metrics_interval_s"],
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(
            wildcards, "hardware", "engine", "server", "client_fidelity", "seed"
        ),
    threads: config["hardware"]["threads"]
    resources:
        bench_slot=1,
        gpu=GPUS,
        mem_mb=16000,
        runtime=60,
    conda:
        SOFTWARE_ENV
    log:
        rule="logs/client_fidelity/{model}.log",
        server="logs/client_fidelity/{model}.server.log",
    benchmark:
        "benchmarks/{model}/client_fidelity.tsv"
    script:
        "../../scripts/client_fidelity.py"


rule tuning:
    """A grid of server settings under a saturating load; each cell is its own server start."""
    output:
        report(
            "results/{model}/tuning.json",
            category=category("tuning"),
            subcategory="{model}",
            caption="../../report/captions/serve.rst",
        ),
    input:
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        pool=rules.workload.output.pool,
        code=script_code("tuning"),
    params:
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
        engine=config["engine"],
        server=config["server"],
        # Only what tuning uses, so a load-sweep change does not rerun the grid.
        load=search_load(),
        tuning=config["tuning"],
        capacity=config["capacity"],
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(wildcards, "hardware", "engine", "tuning", "capacity", "seed"),
    threads: config["hardware"]["threads"]
    resources:
        bench_slot=1,
        gpu=GPUS,
        mem_mb=16000,
        runtime=120,
    conda:
        SOFTWARE_ENV
    log:
        rule="logs/tuning/{model}.log",
    benchmark:
        "benchmarks/{model}/tuning.tsv"
    script:
        "../../scripts/tuning.py"


rule prefix_caching:
    """Prefix caching off and on, two servers taking turns on request sets that share prefixes."""
    output:
        report(
            "results/{model}/prefix_caching.json",
            category=category("prefix_caching"),
            subcategory="{model}",
            caption="../../report/captions/serve.rst",
        ),
    input:
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        code=script_code("prefix_caching"),
    params:
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
        engine=config["engine"],
        server=config["server"],
        prefix_caching=config["prefix_caching"],
        metrics_interval_s=config["load"]["metrics_interval_s"],
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(
            wildcards, "hardware", "engine", "server", "prefix_caching", "seed"
        ),
    threads: config["hardware"]["threads"]
    resources:
        bench_slot=1,
        gpu=GPUS,
        mem_mb=24000,
        runtime=60,
    conda:
        SOFTWARE_ENV
    log:
        rule="logs/prefix_caching/{model}.log",
    benchmark:
        "benchmarks/{model}/prefix_caching.tsv"
    script:
        "../../scripts/prefix_caching.py"


rule variants:
    """Two or more engine configurations, their servers side by side taking turns on the same requests."""
    output:
        report(
            "results/{model}/variants.json",
            category=category("variants"),
            subcategory="{model}",
            caption="../../report/captions/serve.rst",
        ),
    input:
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        # The capacity searches' distinct requests, where variants.capacity asks for them.
        pool=rules.workload.output.pool if config["variants"]["capacity"] else [],
        code=script_code("variants"),
    params:
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
        engine=config["engine"],
        server=config["server"],
        variants=config["variants"],
        slo_ms=config["load"]["slo_ms"],
        # The searches' settings, only where variants.capacity asks for them (as rule capacity's).
        load=(search_load() if config["variants"]["capacity"] else None),
        capacity=concurrency_search_config(),
        seed=config["seed"],
        provenance_config=lambda wildcards: {
            **stage_config(wildcards, "hardware", "engine", "server", "variants", "seed"),
            **({"capacity": concurrency_search_config()} if config["variants"]["capacity"] else {}),
        },
    threads: config["hardware"]["threads"]
    resources:
        bench_slot=1,
        gpu=GPUS,
        mem_mb=24000,
        runtime=60,
    conda:
        SOFTWARE_ENV
    log:
        rule="logs/variants/{model}.log",
    benchmark:
        "benchmarks/{model}/variants.tsv"
    script:
        "../../scripts/variants.py"
