"""The tuning stage's own code on reference servers with a known schedule: each grid cell is a
server started with the cell's settings, its SLO capacity is searched, and the best cell is the
one that serves the most requests in flight. The answers are known in advance, so the search's
decisions and the binding limit it names can be wrong, and the test says so. vLLM's own
behaviour in a cell is the tiny run's (tests/test_capacity.py)."""

import pytest
from conftest import REPO

from infbench.core import provenance
from infbench.core.artifacts import validate
from infbench.engines.servers import ServerSpec
from infbench.report.render import environment
from infbench.report.tuning import view
from infbench.serving.reference_server import ReferenceServer, Schedule
from infbench.serving.tuning import best_cell, run_tuning

# Each decode step takes 10 ms + 10 ms per running request, so TPOT at c requests in flight is
# about 10 + 10c ms: under the 85 ms SLO up to c = 7 (80 ms), over it from c = 8 (90 ms).
SCHEDULE = Schedule(ttft_ms=20, itl_ms=10, itl_ms_per_running=10, num_blocks=1000, block_size=16)
SLO_MS = {"ttft": 200, "tpot": 85}
WORKLOAD = [
    {"id": f"r{i}", "prompt": f"prompt {i}", "prompt_tokens": 2, "max_tokens": 8, "api": "completions"}
    for i in range(4)
]
CAPACITY = {
    "attainment": 0.9,
    "requests_per_probe": 8,
    "repeats": 2,
    "start_concurrency": 2,
    "max_concurrency": 32,
    "max_probes": 8,
    "tolerance": 0.0,  # integer loads: bisection down to neighbours
    "rate": False,
    "min_rate": 0.1,
}


@pytest.mark.slow
def test_each_cell_runs_its_own_settings_and_the_best_cell_serves_the_most(tmp_path):
    started = []

    def start(spec, log_path):
        started.append(spec)
        schedule = Schedule(**{**SCHEDULE.__dict__, "max_num_seqs": spec.flags["max_num_seqs"]})
        return ReferenceServer(spec.served_name, log_path, schedule)

    spec = ServerSpec(
        "unused", "m", "float32", {"max_model_len": 256, "block_size": 16, "enable_prefix_caching": False}, 0, "cpu", 2
    )
    cells = run_tuning(
        spec=spec,
        log_dir=tmp_path,
        workload=WORKLOAD,
        tuning={"grid": {"max_num_seqs": [3, 16]}, "requests": 8, "concurrency": 8},
        request_timeout_s=30,
        load={"burstiness": 1.0, "metrics_interval_s": 0.02, "slo_ms": SLO_MS},
        capacity=CAPACITY,
        tokenizer=None,
        start=start,
        progress=lambda *_: None,
    )
    assert [s.flags for s in started] == [{"max_num_seqs": 3}, {"max_num_seqs": 16}]
    capped, free = (cell["slo_capacity"] for cell in cells)
    # Three slots: a fourth request in flight waits a whole request for its first token (about
    # 300 ms), past the TTFT SLO, at the server's cap.
    assert (capped["capacity"], capped["first_failing"]) == (3, 4), capped["probes"]
    assert capped["binding"]["limit"] == "max_num_seqs", capped["binding"]
    # Sixteen slots: nothing waits; TPOT crosses 85 ms between 7 and 8 requests in flight.
    assert (free["capacity"], free["first_failing"]) == (7, 8), free["probes"]
    assert free["binding"]["limit"] == "compute", free["binding"]
    assert best_cell(cells) == 1
    # The stage's artifact as its script writes it, and the report's section on it.
    artifact = {
        "model": "m",
        "grid": {"max_num_seqs": [3, 16]},
        "requests": 8,
        "concurrency": 8,
        "cells": cells,
        "best_cell": best_cell(cells),
        "provenance": provenance.collect({}, 2, provenance.now_iso()),
    }
    validate(artifact, "tuning")
    section = view(artifact)
    assert section["best_settings"] == [("max_num_seqs", 16)] and section["best_capacity"] == 7
    assert section["table"]["SLO capacity (requests in flight)"].tolist() == [3, 7]
    page = environment(REPO / "report").get_template("sections/tuning.html.j2").render(v=section)
    assert "Best cell: <strong>max_num_seqs = 16</strong>" in page and "serving 7 requests in flight" in page
