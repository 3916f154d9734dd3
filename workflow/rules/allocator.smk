rule allocator:
    """KV-cache allocator analysis: the study's arithmetic, the simulator, vLLM's own pool."""
    output:
        report(
            "results/{model}/allocator.json",
            category="3-4 KV-cache allocation",
            subcategory="{model}",
            caption="../../report/captions/allocator.rst",
        ),
    input:
        model="resources/models/{model}",
        workload="results/{model}/workload.jsonl",
        vllm="results/{model}/vllm_offline.json",
        # The live check compares with the server's scraped KV usage, when the server runs.
        **server_outputs(),
        code=package_modules("allocator", "kvsim", "logging_setup", "study", "workload"),
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
