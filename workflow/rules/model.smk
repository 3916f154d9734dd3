rule model:
    """Resolve a configured model (embedded wheel, hub id or local folder) to a local HF folder."""
    output:
        facts="resources/models/{model}/model.json",
    input:
        code=package_modules("models"),
    params:
        spec=model_spec,
        download_dir="resources/downloads",
    conda:
        "../../envs/cpu.yaml"
    log:
        "logs/model/{model}.log",
    script:
        "../../scripts/model.py"
