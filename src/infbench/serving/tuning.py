"""The tuning grid: one server start per combination of settings, each under the same
saturating closed-loop load, then searched for its SLO capacity (concurrency): the best cell
is the one that serves the most requests in flight within the SLO."""

from __future__ import annotations

import asyncio
import itertools

from infbench.capacity.measure import search_capacity
from infbench.engines.server_metrics import server_kv_facts
from infbench.engines.servers import ServerSpec, start_server
from infbench.engines.settings import server_max_num_seqs
from infbench.serving.client import cycle_requests, run_level
from infbench.serving.sweep import repeat_summary
from infbench.serving.window import ensure_alive


def grid_cells(grid: dict) -> list[dict]:
    """Every combination of the grid's settings (max_num_seqs, max_num_batched_tokens, kv_cache_gib)."""
    keys = sorted(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[key] for key in keys))]


def run_tuning(
    *,
    spec: ServerSpec,
    log_dir,
    workload: list[dict],
    pool: list[dict],
    tuning: dict,
    request_timeout_s: float,
    load: dict,
    capacity: dict,
    tokenizer,
    start=None,
    progress=print,
) -> list[dict]:
    """One server start per grid cell (the specification with the cell's settings, started by
    `start`), each under the same saturating closed-loop load, then its SLO capacity searched
    (concurrency only, with the capacity settings)."""
    start = start or start_server
    requests = cycle_requests(workload, tuning["requests"])
    cells = []
    for index, cell in enumerate(grid_cells(tuning["grid"])):
        cell_spec = spec
        if "kv_cache_gib" in cell:
            cell_spec = cell_spec.with_engine(kv_cache_gib=cell["kv_cache_gib"])
        extra = {key: value for key, value in cell.items() if key != "kv_cache_gib"}
        with start(cell_spec.with_flags(**extra), f"{log_dir}/cell-{index}.log") as server:
            kv = server_kv_facts(server.base_url)
            run = asyncio.run(
                run_level(
                    server.base_url,
                    spec.served_name,
                    requests,
                    concurrency=tuning["concurrency"],
                    arrivals=None,
                    seed=spec.seed,
                    interval_s=load["metrics_interval_s"],
                    timeout_s=request_timeout_s,
                    api=workload[0]["api"],
                )
            )
            ensure_alive(server, f"tuning cell {cell}", run.results)
            searched = search_capacity(
                server,
                workload,
                pool,
                {**capacity, "rate": False},  # a cell's capacity: the concurrency search, one run
                load,
                kv,
                max_model_len=spec.engine["max_model_len"],
                max_num_seqs=server_max_num_seqs({**spec.engine, **extra})["value"],
                seed=spec.seed,
                timeout_s=request_timeout_s,
                progress=progress,
            )["concurrency"]
        level = repeat_summary(
            run,
            slo_ms=load["slo_ms"],
            tokenizer=tokenizer,
            prefix_caching=spec.engine["enable_prefix_caching"],
        )
        level.pop("requests")
        served = searched["at_capacity"]
        cell_capacity = {
            "capacity": searched["capacity"],
            "first_failing": searched["first_failing"],
            "converged": searched["converged"],
            "outcome": searched["outcome"],
            "binding": searched["binding"],
            "output_throughput_at_capacity": served["output_throughput"]["mean"] if served else None,
            "probes": searched["probes"],
        }
        cells.append({"settings": cell, "kv": kv, "startup_s": server.startup_s, **level, "capacity": cell_capacity})
        progress(
            f"tuning {cell}: {level['output_throughput']:.1f} output tok/s, "
            f"peak waiting {level['peak_num_requests_waiting']:.0f}, preemptions {level['preemptions']:.0f}, "
            f"SLO capacity c={searched['capacity']}"
        )
    return cells


def best_cell(cells: list[dict]) -> int | None:
    """The cell serving the most requests in flight within the SLO; among equals, the one with
    the highest output throughput at its capacity. None when no cell met the SLO at all."""
    served = [(i, c["capacity"]) for i, c in enumerate(cells) if c["capacity"]["capacity"] is not None]
    if not served:
        return None
    return max(served, key=lambda item: (item[1]["capacity"], item[1]["output_throughput_at_capacity"] or 0))[0]
