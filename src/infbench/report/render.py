"""The context for the template, and the page: per model its header, its sections in the
stage registry's order (each a view model with the values its partial shows), and its
provenance; the checks, the overview and the run's provenance around them."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import jinja2

from infbench.core import study_figures
from infbench.report.checks import checks_view, collect_checks
from infbench.report.overview import answer, overview_row, overview_table, speed_figure
from infbench.report.page import model_view, provenance_view, read_benchmarks, workload_view
from infbench.report.tables import html_table
from infbench.stages import SECTIONS, Section


def section_views(artifacts: dict) -> dict[str, dict | None]:
    """Every section's view model from one model's artifacts, by section name (None: not shown),
    as the stage registry names each view and the artifacts it reads."""
    views = {}
    for section in SECTIONS:
        if section.beside and views[section.beside] is None:
            views[section.name] = None
            continue
        module, function = section.view.rsplit(".", 1)
        view = getattr(importlib.import_module(module), function)
        views[section.name] = view(*(artifacts.get(name) for name in section.reads))
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
        "answers": [answer(model, artifacts, checks) for model, artifacts in models.items()],
        "overview": overview_table([overview_row(model, artifacts) for model, artifacts in models.items()]),
        "overview_figure": speed_figure(models),
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
