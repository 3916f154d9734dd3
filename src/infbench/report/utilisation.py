"""Section 8: distance to the hardware, the memory bandwidth utilisation (MBU) of every decode
figure against this machine's measured bandwidth."""

from __future__ import annotations

import pandas as pd

from infbench.report.tables import fmt


def view(utilisation: dict | None) -> dict | None:
    """What the section shows; None where MBU was not computed."""
    if not utilisation:
        return None
    rows = [
        {
            "stage": row["stage"].replace("_", " "),
            "case": row["case"],
            "MBU %": 100 * row["mbu"],
            "model GB/s": row["bytes_per_s"] / 1e9,
            "running": row["running"],
            "running from": row["running_from"],
            "mean KV tokens": row["kv_tokens"],
            "weights share %": 100 * row["weights_share"],
        }
        for row in utilisation["rows"]
    ]
    return {
        "bandwidth_gb_s": fmt(utilisation["bandwidth_bytes_per_s"] / 1e9, 1),
        "method": utilisation["bandwidth_method"],
        "kernels": ", ".join(
            f"{name} {fmt(value / 1e9, 1)} GB/s" for name, value in utilisation.get("bandwidth_by_kernel", {}).items()
        ),
        "weights_gb": fmt(utilisation["weight_bytes"] / 1e9, 2),
        "dtype": utilisation["dtype"],
        "formula": utilisation["formula"],
        "table": pd.DataFrame(rows),
    }
