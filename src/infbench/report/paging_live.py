"""Section 7: the study's 4.8x on vLLM itself: a contiguous-like server and a paged one, each with
the study's pool, driven past what either holds."""

from __future__ import annotations

import re

import pandas as pd

from infbench.core import study_figures
from infbench.report.tables import fmt
from infbench.stages import SECTION


def title(study_ratio: float) -> str:
    """The registry's title with the study's ratio as the artifact gives it ("4.8×")."""
    return re.sub(r"\b\d+(?:\.\d+)?x\b", f"{fmt(study_ratio, 1)}×", SECTION["paging_live"].title)


def server_table(paging: dict) -> pd.DataFrame:
    study = paging["study"]
    rows = []
    for server, study_users in zip(paging["servers"], (study["contiguous_users"], study["paged_users"])):
        simulator, live = server["simulator"], server["vllm"]
        rows.append(
            {
                "server": f"{server['name']} (blocks of {server['block_size']})",
                "pool blocks (lent)": f"{server['kv']['num_blocks']} ({simulator['usable_blocks']})",
                "study's arithmetic": study_users,
                "simulator: fit at peak": simulator["users_at_peak_footprint"],
                "simulator: replay peak running": simulator["replay_peak_running"],
                "vLLM peak running": int(live["peak_num_requests_running"]),
                "vLLM peak waiting": int(live["peak_num_requests_waiting"]),
                "preemptions vLLM / replay": f"{live['preemptions']:.0f} / {simulator['replay_preemptions']}",
                "checks": ", ".join(f"{c['name']} {c['status']}" for c in server["checks"]),
            }
        )
    return pd.DataFrame(rows, dtype=object)


def view(paging: dict | None) -> dict | None:
    """What the section shows; None where the live paging stage did not run."""
    if not paging:
        return None
    study, settings = paging["study"], paging["settings"]
    contiguous, paged = paging["servers"]
    simulator_ratio = paged["simulator"]["replay_peak_running"] / contiguous["simulator"]["replay_peak_running"]
    return {
        "title": title(study["ratio"]),
        "pool_tokens": f"{settings['pool_tokens']:,}",
        "lent_slots": f"{contiguous['simulator']['lent_slots']:,}",
        "paged_blocks": paged["kv"]["num_blocks"],
        "max_model_len": settings["max_model_len"],
        "paged_block_size": paged["block_size"],
        "requests": settings["requests"],
        "request_tokens": ", ".join(str(tokens) for tokens in study_figures.KV_REQUEST_TOKENS),
        "output_tokens": settings["output_tokens"],
        "contiguous_running": fmt(contiguous["vllm"]["peak_num_requests_running"], 0),
        "paged_running": fmt(paged["vllm"]["peak_num_requests_running"], 0),
        "live_ratio": fmt(paging["live_ratio"], 2),
        "study_contiguous": study["contiguous_users"],
        "study_paged": study["paged_users"],
        "study_ratio": fmt(study["ratio"], 2),
        "simulator_ratio": fmt(simulator_ratio, 2),
        "table": server_table(paging),
        "contiguous_blocks": contiguous["kv"]["num_blocks"],
        "contiguous_lent": contiguous["simulator"]["usable_blocks"],
        "contiguous_max_concurrency": fmt(contiguous["kv"]["max_concurrency_at_max_model_len"], 1),
    }
