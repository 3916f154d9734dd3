"""Numbers as text: table cells formatted by type (counts as integers, measurements with
decimals), escaped, and right-aligned where numeric."""

from __future__ import annotations

import math
import numbers

import pandas as pd
from markupsafe import escape


def cell(value, digits: int) -> tuple[str, bool]:
    """(escaped text, is numeric) for one table cell."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–", True
    if isinstance(value, bool):
        return str(value), False
    if isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer() and abs(value) >= 1000):
        return f"{int(value):,}", True
    if isinstance(value, numbers.Real):
        return f"{value:,.{digits}f}", True
    return str(escape(value)), False


def html_table(frame: pd.DataFrame, digits: int = 3, index: bool = False) -> str:
    """A table with numbers right-aligned and formatted by type, text left-aligned and escaped."""
    if index:
        frame = frame.reset_index()
    head = "".join(f"<th>{escape(column)}</th>" for column in frame.columns)
    rows = []
    for record in frame.itertuples(index=False):
        cells = []
        for value in record:
            text, numeric = cell(value, digits)
            cells.append(f'<td class="{"num" if numeric else "text"}">{text}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def fmt(value, digits: int = 1, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:,.{digits}f}{unit}"
