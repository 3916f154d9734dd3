"""Section 5.3: the tuning grid, each cell a server start searched for its SLO capacity."""

from __future__ import annotations

import pandas as pd

from infbench.stages import SECTION


def cell_table(tuning: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                **cell["settings"],
                "SLO capacity (requests in flight)": cell["capacity"]["capacity"],
                "first failing": cell["capacity"]["first_failing"],
                "search ended": cell["capacity"]["outcome"].replace("_", " "),
                "binding limit": cell["capacity"]["binding"]["limit"].replace("_", " "),
                "output tok/s at capacity": cell["capacity"]["output_throughput_at_capacity"],
                "output tok/s": cell["output_throughput"],
                "median TTFT ms": cell["median_ttft_ms"],
                "median TPOT ms": cell["median_tpot_ms"],
                "p99 E2E ms": cell["p99_e2el_ms"],
                "peak waiting": cell["peak_num_requests_waiting"],
                "preemptions": cell["preemptions"],
                "startup s": cell["startup_s"],
            }
            for cell in tuning["cells"]
        ]
    )


def view(tuning: dict | None) -> dict | None:
    """What the section shows; None where the grid did not run."""
    if not tuning:
        return None
    best = tuning["cells"][tuning["best_cell"]] if tuning["best_cell"] is not None else None
    return {
        "requests": tuning["requests"],
        "concurrency": tuning["concurrency"],
        "capacity_section": SECTION["capacity"].number,
        "best_settings": list(best["settings"].items()) if best else None,
        "best_capacity": best["capacity"]["capacity"] if best else None,
        "table": cell_table(tuning),
    }
