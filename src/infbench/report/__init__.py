"""The HTML report: every artifact merged by a Jinja2 template into one self-contained page
(inline CSS, plots as embedded PNGs, each plot's numbers in a table beside it)."""

from infbench.report.render import build_context, render

__all__ = ["build_context", "render"]
