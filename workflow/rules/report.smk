rule report:
    """One self-contained HTML page from every artifact (Jinja2 template under report/)."""
    output:
        report(
            "results/report.html",
            category="Report",
            caption="../../report/captions/report.rst",
        ),
    input:
        artifacts=report_artifacts(),
        benchmarks=report_benchmarks(),
        template=REPORT_TEMPLATE,
        code=package_modules("report", "study"),
    params:
        models=list(MODELS),
        config=config,
    conda:
        SOFTWARE_ENV
    log:
        "logs/report.log",
    script:
        "../../scripts/report.py"
