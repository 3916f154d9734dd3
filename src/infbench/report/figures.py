"""Plots as embedded PNGs, each with the numbers behind it, and a check that every text of a
plot can be read: none falls outside its canvas (a label cut off by the figure's edge) and no
tick label runs into its neighbour. Category labels along x that would run into each other are
wrapped, then turned, before the check."""

from __future__ import annotations

import base64
import io
import textwrap
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.category import UnitData  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from infbench.report.tables import html_table  # noqa: E402


@dataclass
class Figure:
    """A plot, the numbers behind it, and any text of the plot a reader could not read: cut off
    by its canvas, or a tick label running into its neighbour."""

    title: str
    png_data_uri: str
    table: pd.DataFrame
    caption: str = ""
    unreadable_text: list[str] = field(default_factory=list)

    def table_html(self) -> str:
        return html_table(self.table)


def drawn_texts(fig) -> list[Text]:
    """The texts the saved image shows: visible, not empty, inside visible parents (a twin
    axis keeps a label it does not draw), and for tick labels only those of ticks inside the
    axis' view (matplotlib keeps labels for ticks it does not draw)."""
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            slack = (high - low) * 1e-9
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not low - slack <= tick.get_loc() <= high + slack:
                    hidden.update((tick.label1, tick.label2))
    drawn, pending = [], [fig]
    while pending:
        artist = pending.pop()
        if not artist.get_visible() or artist in hidden:
            continue
        if isinstance(artist, Text) and artist.get_text().strip():
            drawn.append(artist)
        pending.extend(artist.get_children())
    return drawn


def clipped_text(fig) -> list[str]:
    """Every drawn text (labels, ticks, legends, annotations) that reaches past the canvas by
    more than a pixel: what a reader would see cut off."""
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    clipped = []
    for text in drawn_texts(fig):
        extent = text.get_window_extent(renderer)
        if (
            extent.x0 < canvas.x0 - 1
            or extent.y0 < canvas.y0 - 1
            or extent.x1 > canvas.x1 + 1
            or extent.y1 > canvas.y1 + 1
        ):
            clipped.append(text.get_text())
    return clipped


def colliding_ticks(fig, axes=None) -> list[str]:
    """Each pair of neighbouring tick labels on one side of an axis (major and minor, of
    `axes`, default every axis of the figure) that overlap by more than 2 pixels both ways:
    labels a reader would see run into each other. A label turned other than by a right angle
    is left out: its box is not its outline."""
    renderer = fig.canvas.get_renderer()
    drawn = set(drawn_texts(fig))
    colliding = []
    for axis in axes or [axis for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]:
        ticks = axis.get_major_ticks() + axis.get_minor_ticks()
        for side in ("label1", "label2"):
            shown = [getattr(tick, side) for tick in ticks]
            shown = [label for label in shown if label in drawn and label.get_rotation() % 90 == 0]
            labels = sorted(shown, key=lambda label: label.get_position())
            extents = [label.get_window_extent(renderer) for label in labels]
            for (left, a), (right, b) in zip(zip(labels, extents), zip(labels[1:], extents[1:])):
                if min(a.x1, b.x1) - max(a.x0, b.x0) > 2 and min(a.y1, b.y1) - max(a.y0, b.y0) > 2:
                    colliding.append(f"{left.get_text()!r} runs into {right.get_text()!r}")
    return colliding


def fit_category_labels(fig, ax, width: int = 10) -> None:
    """Category labels along x (levels, variants) that run into each other: smaller and wrapped
    at `width` characters, then upright if they still do."""
    if not isinstance(ax.xaxis.units, UnitData) or not colliding_ticks(fig, [ax.xaxis]):  # numeric: its own ticks
        return
    labels = [label.get_text() for label in ax.get_xticklabels()]
    wrapped = [textwrap.fill(label, width, break_long_words=False) for label in labels]
    ax.set_xticks(ax.get_xticks(), wrapped, fontsize=8)
    fig.tight_layout()
    if colliding_ticks(fig, [ax.xaxis]):
        ax.set_xticks(ax.get_xticks(), labels, rotation=90, fontsize=8)


def figure(title: str, draw, table: pd.DataFrame, caption: str = "", size=(7.5, 3.6)) -> Figure:
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=size, dpi=110)
    draw(ax)
    fig.tight_layout()
    fit_category_labels(fig, ax)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    unreadable = clipped_text(fig) + colliding_ticks(fig)
    plt.close(fig)
    return Figure(
        title, "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode(), table, caption, unreadable
    )
