rule html_report:
    """One self-contained HTML page from every artifact, rendered by the declared template."""
    output:
        report(
            "results/report.html",
            category="Report",
            caption="../../report/captions/report.rst",
        ),
    input:
        artifacts=artifact_paths(),
        run_times=run_time_records(),
        template=repository_file("report", "report.html.j2"),
        style=repository_file("report", "style.css"),
        code=script_code("html_report"),
    params:
        artifacts=all_model_artifacts(),
        config=config,
    conda:
        SOFTWARE_ENV
    log:
        "logs/html_report.log",
    script:
        "../../scripts/html_report.py"
