"""The context for the template, and the page: every model's sections, the checks, the
overview and provenance, rendered by the Jinja2 template the workflow names."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pandas as pd

from infbench.core import study_figures
from infbench.report.capacity import capacity_section, paging_section, utilisation_section
from infbench.report.checks import collect_checks
from infbench.report.sections import (
    allocator_section,
    offline_section,
    overview_row,
    prefix_caching_section,
    read_benchmarks,
    serving_section,
    workload_section,
)
from infbench.report.tables import fmt, html_table


def build_context(models: dict[str, dict], config: dict, benchmarks: list[str]) -> dict:
    sections, checks, overview = [], [], []
    for model, artifacts in models.items():
        offline = offline_section(
            artifacts.get("hf_baseline"), artifacts.get("vllm_offline"), artifacts.get("comparison")
        )
        serving = serving_section(
            artifacts.get("server"), artifacts.get("load"), artifacts.get("tuning"), artifacts.get("client_fidelity")
        )
        sections.append(
            {
                "model": model,
                "facts": artifacts["model"],
                "offline": offline,
                "workload": workload_section(artifacts.get("workload"), artifacts.get("workload_summary")),
                "allocator": allocator_section(artifacts.get("allocator"), artifacts.get("kv_validation")),
                "serving": serving,
                "prefix_caching": prefix_caching_section(artifacts.get("prefix_caching")),
                "capacity": capacity_section(artifacts.get("slo_capacity")),
                "paging": paging_section(artifacts.get("paging_live")),
                "utilisation": utilisation_section(artifacts.get("utilisation")),
                "provenance": next(
                    (artifacts[k]["provenance"] for k in ("vllm_offline", "hf_baseline", "load") if artifacts.get(k)),
                    None,
                ),
            }
        )
        checks += collect_checks(model, artifacts)
        overview.append(overview_row(model, artifacts))
    return {
        "sections": sections,
        "checks": checks,
        "overview": pd.DataFrame(overview).set_index("model").T.rename_axis("figure").reset_index()
        if overview
        else pd.DataFrame(),
        "config_yaml": json.dumps(config, indent=2),
        "benchmarks": read_benchmarks(benchmarks),
        "study": study_figures,
        "fmt": fmt,
        "worst": checks[0]["status"] if checks else "pass",
    }


def render(context: dict, template_path: str | Path) -> str:
    """The page, from the template file the workflow declares as the report rule's input."""
    template_path = Path(template_path)
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_path.parent),
        autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["fmt"] = fmt
    environment.filters["table"] = html_table
    environment.filters["tojson_pretty"] = lambda value: json.dumps(value, indent=2, default=str)
    return environment.get_template(template_path.name).render(**context)
