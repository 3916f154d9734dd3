"""Plots as embedded PNGs, each with the numbers behind it, and a check that no text of a
plot falls outside its canvas (a label cut off by the figure's edge)."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from infbench.report.tables import html_table  # noqa: E402


@dataclass
class Figure:
    """A plot, the numbers behind it, and any text of the plot that its canvas cuts off."""

    title: str
    png_data_uri: str
    table: pd.DataFrame
    caption: str = ""
    clipped_text: list[str] = field(default_factory=list)

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


def figure(title: str, draw, table: pd.DataFrame, caption: str = "", size=(7.5, 3.6)) -> Figure:
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=size, dpi=110)
    draw(ax)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    clipped = clipped_text(fig)
    plt.close(fig)
    return Figure(
        title, "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode(), table, caption, clipped
    )
