rule machine:
    """This machine's memory bandwidth (a STREAM triad on the engine's cores, or on the GPU)."""
    output:
        "results/machine.json",
    input:
        code=script_code("machine"),
    params:
        device=config["hardware"]["device"],
        threads=config["hardware"]["threads"],
        provenance_config={"hardware": config["hardware"]},
    threads: config["hardware"]["threads"]
    resources:
        bench_slot=1,
        gpu=GPUS,
        mem_mb=4000,
        runtime=10,
    conda:
        SOFTWARE_ENV
    log:
        "logs/machine.log",
    script:
        "../../scripts/machine.py"


rule utilisation:
    """Model bandwidth utilisation of every offline scenario and serving level against the
    machine's measured bandwidth."""
    output:
        report(
            "results/{model}/utilisation.json",
            category=category("utilisation"),
            subcategory="{model}",
            caption="../../report/captions/utilisation.rst",
        ),
    input:
        unpack(utilisation_inputs),
        machine=rules.machine.output[0],
        model=rules.model.output[0],
        code=script_code("utilisation"),
    params:
        dtype=DTYPE,
        provenance_config=lambda wildcards: stage_config(wildcards, "hardware"),
    conda:
        SOFTWARE_ENV
    log:
        "logs/utilisation/{model}.log",
    script:
        "../../scripts/utilisation.py"
