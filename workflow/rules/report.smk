# The page and every template it includes (its partials per section and part, the figure macro):
# an edited one reruns the report.
REPORT_PARTIALS = sorted(
    repository_file(os.path.relpath(path, workflow.basedir))
    for pattern in ("report/macros.html.j2", "report/sections/*.html.j2", "report/parts/*.html.j2")
    for path in Path(workflow.basedir).glob(pattern)
)


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
        partials=REPORT_PARTIALS,
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
