"""Section 3: the KV-cache problem, the study's arithmetic on its five requests reproduced."""

from __future__ import annotations

import pandas as pd

from infbench.core import study_figures


def view(allocator: dict | None) -> dict | None:
    """What the section shows; None without the allocator analysis."""
    if not allocator:
        return None
    study_table = allocator["study"]["table"]
    reported = allocator["study"]["reported"]
    by_admission = allocator["study"]["by_admission"]
    matches = allocator["study"]["matches_study"]
    # Counts and shares share a column: object dtype keeps each value's type (a count stays an integer).
    study_rows = pd.DataFrame(
        [
            {"figure": key.replace("_", " "), "study reported": reported[key], "reproduced": study_table[key]}
            for key in reported
        ],
        dtype=object,
    )
    return {
        "request_tokens": ", ".join(str(tokens) for tokens in study_figures.KV_REQUEST_TOKENS),
        "reserved": study_figures.KV_RESERVED_PER_REQUEST,
        "pool_slots": f"{study_figures.KV_POOL_SLOTS:,}",
        "page": study_figures.KV_PAGE,
        "status": "pass" if matches else "fail",
        "verdict": "reproduced exactly" if matches else "differs",
        "study_rows": study_rows,
        "contiguous_users": by_admission["contiguous_users"],
        "paged_users": by_admission["paged_users"],
        "ideal_users": by_admission["ideal_users"],
    }
