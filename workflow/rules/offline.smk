# Offline baselines: Transformers generate() vs vllm.LLM on the same scenarios, then their
# comparison. Measuring rules take the whole `bench_slot` resource so they never overlap.
# With benchmark.rounds > 1 both engines run again in fresh jobs, interleaved through their
# inputs (HF 1, vLLM 1, HF 2, vLLM 2, ...), for intervals across processes.


rule hf_baseline:
    """Transformers generate(): the study's request alone (and, with benchmark.workload_scenarios, the
    workload one at a time and in static batches)."""
    output:
        report(
            "results/{model}/hf_baseline.json",
            category=category("hf_baseline"),
            subcategory="{model}",
            caption="../../report/captions/offline.rst",
        ),
    input:
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        code=script_code("hf_baseline"),
        after=lambda wildcards: interleaved_after("hf", wildcards),
    params:
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
        benchmark=MEASURED_BENCHMARK,
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(wildcards, "hardware", "benchmark", "seed"),
    threads: config["hardware"]["threads"]
    resources:
        bench_slot=1,
        gpu=GPUS,
        mem_mb=16000,
        runtime=120,
    conda:
        SOFTWARE_ENV
    log:
        "logs/hf_baseline/{model}.log",
    benchmark:
        "benchmarks/{model}/hf_baseline.tsv"
    script:
        "../../scripts/hf_baseline.py"


rule vllm_offline:
    """vllm.LLM: the same scenarios (with benchmark.workload_scenarios, plus the whole workload at
    once: continuous batching)."""
    output:
        report(
            "results/{model}/vllm_offline.json",
            category=category("vllm_offline"),
            subcategory="{model}",
            caption="../../report/captions/offline.rst",
        ),
    input:
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        code=script_code("vllm_offline"),
        after=lambda wildcards: interleaved_after("vllm", wildcards),
    params:
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
        engine=config["engine"],
        benchmark=MEASURED_BENCHMARK,
        seed=config["seed"],
        provenance_config=lambda wildcards: stage_config(wildcards, "hardware", "engine", "benchmark", "seed"),
    threads: config["hardware"]["threads"]
    resources:
        bench_slot=1,
        gpu=GPUS,
        mem_mb=16000,
        runtime=120,
    conda:
        SOFTWARE_ENV
    log:
        "logs/vllm_offline/{model}.log",
    benchmark:
        "benchmarks/{model}/vllm_offline.tsv"
    script:
        "../../scripts/vllm_offline.py"


use rule hf_baseline as hf_baseline_round with:
    output:
        "results/{model}/offline_rounds/hf_baseline_{round}.json",
    log:
        "logs/hf_baseline/{model}_round{round}.log",
    benchmark:
        "benchmarks/{model}/hf_baseline_round{round}.tsv"


use rule vllm_offline as vllm_offline_round with:
    output:
        "results/{model}/offline_rounds/vllm_offline_{round}.json",
    log:
        "logs/vllm_offline/{model}_round{round}.log",
    benchmark:
        "benchmarks/{model}/vllm_offline_round{round}.tsv"


rule offline_comparison:
    """vLLM / HF ratios with confidence intervals, greedy agreement, and the study's figures."""
    output:
        report(
            "results/{model}/offline_comparison.json",
            category=category("offline_comparison"),
            subcategory="{model}",
            caption="../../report/captions/offline_comparison.rst",
        ),
    input:
        hf=offline_rounds("hf"),
        vllm=offline_rounds("vllm"),
        model=rules.model.output[0],
        workload=rules.workload.output.requests,
        code=script_code("offline_comparison"),
    params:
        agreement_threshold=config["benchmark"]["agreement_threshold"],
        device=config["hardware"]["device"],
        dtype=DTYPE,
        threads=config["hardware"]["threads"],
    threads: config["hardware"]["threads"]
    resources:
        # It runs the model: it must not share the CPU with a measurement.
        bench_slot=1,
    conda:
        SOFTWARE_ENV
    log:
        "logs/offline_comparison/{model}.log",
    script:
        "../../scripts/offline_comparison.py"
