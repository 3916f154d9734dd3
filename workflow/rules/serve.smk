rule serve:
    """vLLM's OpenAI-compatible server, started, measured under load, and stopped by this rule."""
    output:
        server="results/{model}/server.json",
        load="results/{model}/load.json",
    input:
        facts="resources/models/{model}/model.json",
        workload="results/{model}/workload.jsonl",
        code=package_modules("engines", "loadgen", "logging_setup", "metrics", "server", "serving", "stats", "study",
                             "workload"),
    params:
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
        engine=config["engine"],
        server=config["server"],
        load=config["load"],
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(wildcards, "hardware", "engine", "server", "load", "seed"),
    threads: config["hardware"]["threads"]
    resources:
        bench_slot=1,
    conda:
        "../../envs/cpu.yaml"
    log:
        rule="logs/serve/{model}.log",
        server="logs/serve/{model}.server.log",
    benchmark:
        "benchmarks/{model}/serve.tsv"
    script:
        "../../scripts/serve.py"


rule tuning:
    """A grid of server settings under a saturating load; each cell is its own server start."""
    output:
        "results/{model}/tuning.json",
    input:
        facts="resources/models/{model}/model.json",
        workload="results/{model}/workload.jsonl",
        code=package_modules("engines", "loadgen", "logging_setup", "metrics", "server", "serving", "stats"),
    params:
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
        engine=config["engine"],
        server=config["server"],
        load=config["load"],
        tuning=config["tuning"],
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(wildcards, "hardware", "engine", "tuning", "seed"),
    threads: config["hardware"]["threads"]
    resources:
        bench_slot=1,
    conda:
        "../../envs/cpu.yaml"
    log:
        rule="logs/tuning/{model}.log",
        servers=directory("logs/tuning/{model}.servers"),
    benchmark:
        "benchmarks/{model}/tuning.tsv"
    script:
        "../../scripts/tuning.py"
