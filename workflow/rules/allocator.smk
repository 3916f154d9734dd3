rule allocator:
    """KV-cache allocator analysis: the study's arithmetic, the simulator, vLLM's own pool.
    A pure function of the model, the workload, vLLM's offline run and the engine settings."""
    output:
        report(
            "results/{model}/allocator.json",
            category="3-4 KV-cache allocation",
            subcategory="{model}",
            caption="../../report/captions/allocator.rst",
        ),
    input:
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        vllm=rules.vllm_offline.output[0],
        code=package_modules(
            "allocator_analysis",
            "engine_settings",
            "kv_simulator",
            "study_figures",
            "workload",
            "workload_sources",
        ),
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
    """The simulator checked live: its predicted KV usage per load level against the usage the
    server's /metrics reported during that level."""
    output:
        report(
            "results/{model}/kv_validation.json",
            category="3-4 KV-cache allocation",
            subcategory="{model}",
            caption="../../report/captions/allocator.rst",
        ),
    input:
        server=rules.serve.output.server,
        load=rules.serve.output.load,
        code=package_modules("kv_simulator", "kv_validation"),
    params:
        max_model_len=config["engine"]["max_model_len"],
        provenance_config=lambda wildcards: stage_config(wildcards, "engine", "load"),
    conda:
        SOFTWARE_ENV
    log:
        "logs/kv_validation/{model}.log",
    script:
        "../../scripts/kv_validation.py"
