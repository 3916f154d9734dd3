"""The context for the template, and the page: per model its header, its sections in the
stage registry's order (each a view model with the values its partial shows), and its
provenance; the checks, the overview and the run's provenance around them."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2

from infbench.core import study_figures
from infbench.report import (
    capacity,
    client_fidelity,
    kv_problem,
    offline,
    paging,
    paging_live,
    prefix_caching,
    serving,
    tuning,
    utilisation,
)
from infbench.report.checks import checks_view, collect_checks
from infbench.report.overview import overview_row, overview_table
from infbench.report.page import model_view, provenance_view, read_benchmarks, workload_view
from infbench.report.tables import html_table
from infbench.stages import SECTIONS, Section


def section_views(artifacts: dict) -> dict[str, dict | None]:
    """Every section's view model from one model's artifacts, by section name (None: not shown)."""
    views = {
        "offline": offline.view(
            artifacts.get("hf_baseline"), artifacts.get("vllm_offline"), artifacts.get("comparison")
        ),
        "kv_problem": kv_problem.view(artifacts.get("allocator")),
        "paging": paging.view(
            artifacts.get("allocator"), artifacts.get("kv_validation"), live=bool(artifacts.get("paging_live"))
        ),
        "serving": serving.view(artifacts.get("server"), artifacts.get("load")),
        "client_fidelity": client_fidelity.view(artifacts.get("client_fidelity")),
        "prefix_caching": prefix_caching.view(artifacts.get("prefix_caching")),
        "tuning": tuning.view(artifacts.get("tuning")),
        "capacity": capacity.view(artifacts.get("slo_capacity")),
        "paging_live": paging_live.view(artifacts.get("paging_live")),
        "utilisation": utilisation.view(artifacts.get("utilisation")),
    }
    if views["serving"] is None:
        # The serving stage's companions are read beside its sweep: without one, none is shown.
        views.update(client_fidelity=None, prefix_caching=None, tuning=None)
    return views


def section_part(section: Section, view: dict) -> dict:
    """A section as the page shows it: its heading from the registry (a view may give its title
    as measured, e.g. the study's ratio), its partial and its view model."""
    return {
        "name": section.name,
        "heading": f"{section.number}. {view.get('title', section.title)}",
        "template": f"sections/{section.name}.html.j2",
        "view": view,
    }


def model_context(model: str, artifacts: dict) -> dict:
    views = section_views(artifacts)
    return {
        "name": model,
        "facts": model_view(artifacts["model"]),
        "workload": workload_view(artifacts.get("workload"), artifacts.get("workload_summary")),
        "sections": [section_part(s, views[s.name]) for s in SECTIONS if views[s.name] is not None],
        "provenance": provenance_view(artifacts),
    }


def build_context(models: dict[str, dict], config: dict, benchmarks: list[str]) -> dict:
    checks = [check for model, artifacts in models.items() for check in collect_checks(model, artifacts)]
    return {
        "models": [model_context(model, artifacts) for model, artifacts in models.items()],
        "checks": checks_view(checks),
        "overview": overview_table([overview_row(model, artifacts) for model, artifacts in models.items()]),
        "run": {
            "benchmarks": read_benchmarks(benchmarks),
            "config_yaml": json.dumps(config, indent=2),
            "study_hardware": study_figures.HARDWARE,
        },
    }


def environment(folder: str | Path) -> jinja2.Environment:
    """Templates of `folder` (report/: the page, its partials, macros and stylesheet). Numbers
    reach them formatted by the view models; a table is formatted by `table`."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["table"] = html_table
    env.filters["tojson_pretty"] = lambda value: json.dumps(value, indent=2, default=str)
    return env


def render(context: dict, template_path: str | Path) -> str:
    """The page, from the template file the workflow declares as the report rule's input; what it
    includes is loaded from the same folder."""
    template_path = Path(template_path)
    return environment(template_path.parent).get_template(template_path.name).render(**context)
