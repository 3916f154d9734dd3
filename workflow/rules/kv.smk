# KV-cache analysis: the allocator study from the offline run, the simulator checked live against the
# serving levels, and the study's 4.8x on vLLM itself (two servers of its own).


rule allocator:
    """KV-cache allocator analysis: the study's arithmetic, the simulator, vLLM's own pool.
    A pure function of the model, the workload, vLLM's offline run and the engine settings."""
    output:
        report(
            "results/{model}/allocator.json",
            category=category("allocator"),
            subcategory="{model}",
            caption="../../report/captions/allocator.rst",
        ),
    input:
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        vllm=rules.vllm_offline.output[0],
        code=script_code("allocator"),
    params:
        allocator=config["allocator"],
        dtype=DTYPE,
        kv_cache_gib=config["engine"]["kv_cache_gib"],
        max_model_len=config["engine"]["max_model_len"],
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(wildcards, "allocator", "engine", "seed"),
    conda:
        SOFTWARE_ENV
    log:
        "logs/allocator/{model}.log",
    script:
        "../../scripts/allocator.py"


rule kv_validation:
    """The simulator checked live: the blocks the requests in flight held by its allocation rule
    (and by its rival, reservation at admission), against the usage the server's /metrics
    reported, over each load level's time series. The model, workload and request pool: with
    prefix caching on, which blocks requests share follows from their prompts' tokens."""
    output:
        report(
            "results/{model}/kv_validation.json",
            category=category("kv_validation"),
            subcategory="{model}",
            caption="../../report/captions/allocator.rst",
        ),
    input:
        server=rules.serve.output.server,
        load=rules.serve.output.load,
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        pool=rules.workload.output.pool,
        code=script_code("kv_validation"),
    params:
        provenance_config=lambda wildcards: stage_config(wildcards, "engine", "load"),
    conda:
        SOFTWARE_ENV
    log:
        "logs/kv_validation/{model}.log",
    script:
        "../../scripts/kv_validation.py"


rule paging_live:
    """The study's 4.8x on vLLM itself: a pool of 10,000 token slots, one 512-token block per
    request against paging, both servers driven above their limits."""
    output:
        report(
            "results/{model}/paging_live.json",
            category=category("paging_live"),
            subcategory="{model}",
            caption="../../report/captions/allocator.rst",
        ),
    input:
        model=rules.model.output[0],
        code=script_code("paging_live"),
    params:
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
        engine=config["engine"],
        server=config["server"],
        paging_live=config["paging_live"],
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(
            wildcards, "hardware", "engine", "server", "paging_live", "seed"
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
        rule="logs/paging_live/{model}.log",
    benchmark:
        "benchmarks/{model}/paging_live.tsv"
    script:
        "../../scripts/paging_live.py"
