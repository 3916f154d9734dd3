rule model:
    """Resolve a configured model (embedded wheel, hub id or local folder) to a local HF folder.
    Its output is a pure function of the model spec: shareable through `snakemake --cache`."""
    output:
        directory("resources/models/{model}"),
    input:
        code=package_modules("models"),
    params:
        spec=model_spec,
        download_dir="resources/downloads",
    resources:
        # Conversion is CPU-heavy: it must not share the CPU with a measurement.
        bench_slot=1,
    conda:
        SOFTWARE_ENV
    cache: "omit-software"
    log:
        "logs/model/{model}.log",
    script:
        "../../scripts/model.py"
