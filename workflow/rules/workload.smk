rule workload:
    """One seeded prompt set that every later stage runs, and the distinct requests the serving
    passes draw from, token counts from the model's tokenizer."""
    output:
        requests="results/{model}/workload.jsonl",
        pool="results/{model}/request_pool.jsonl",
        summary="results/{model}/workload_summary.json",
    input:
        model=rules.model.output[0],
        source_file=workload_source_file(),
        code=script_code("workload"),
    params:
        workload=config["workload"],
        max_model_len=config["engine"]["max_model_len"],
        study_max_tokens=max(config["benchmark"]["study_max_new_tokens"]),
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(wildcards, "workload", "seed"),
    conda:
        SOFTWARE_ENV
    log:
        "logs/workload/{model}.log",
    script:
        "../../scripts/workload.py"
