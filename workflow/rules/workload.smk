rule workload:
    """One seeded prompt set that every later stage runs, token counts from the model's tokenizer."""
    output:
        "results/{model}/workload.jsonl",
    input:
        model=rules.model.output[0],
        code=package_modules("workload"),
    params:
        workload=config["workload"],
        max_model_len=config["engine"]["max_model_len"],
        study_max_tokens=max(config["benchmark"]["study_max_new_tokens"]),
        seed=config["seed"],
    conda:
        SOFTWARE_ENV
    log:
        "logs/workload/{model}.log",
    script:
        "../../scripts/workload.py"
