"""The serving stages' shared server (infbench.engines.shared_server), on the reference server:
stages of one run find the server the first one started, a stage that needs a fresh one gets
it, each stage's server log holds its own part, and the server stops when the run ends, when no
stage has used it for the idle time, or when `stop_all` stops it; a server that fails to start
fails the stage with its log, and leaves nothing running."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time

import httpx
import psutil
import pytest

from infbench.engines.servers import ServerSpec
from infbench.engines.shared_server import (
    SharedServer,
    read_state,
    registry_dir,
    server_key,
    stop_all,
    stop_idle,
)
from infbench.engines.vllm_server import ServerError, port_is_free
from infbench.serving.reference_server import Schedule, reference_command


class ReferenceShared(SharedServer):
    """The shared server with the reference server in vLLM's place."""

    def server_command(self, port: int) -> list[str]:
        return reference_command(self.host, port, self.spec.served_name, Schedule(), None, None)


class FailingShared(SharedServer):
    def server_command(self, port: int) -> list[str]:
        return [sys.executable, "-c", "import sys; print('no such model here'); sys.exit(3)"]


SPEC = ServerSpec(
    model_dir="/nonexistent/model",
    served_name="reference",
    dtype="float32",
    engine={"max_model_len": 512, "kv_cache_gib": 1.0, "block_size": 128, "enable_prefix_caching": False},
    seed=0,
    device="cpu",
    threads=1,
    startup_timeout_s=60,
)


@pytest.fixture
def run():
    """A process standing for the Snakemake run the stages belong to."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield psutil.Process(process.pid)
    process.kill()
    process.wait()


def served(url: str) -> bool:
    try:
        return httpx.get(url + "/v1/models", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(condition, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def ended(pid: int) -> bool:
    """Gone, or a zombie (the supervisor is this process's child here, reaped later)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stopped(state: dict) -> bool:
    return ended(state["server_pid"]) and ended(state["supervisor_pid"])


def test_stages_of_one_run_share_the_server_and_a_fresh_one_restarts_it(tmp_path, run, monkeypatch):
    monkeypatch.setattr("infbench.engines.shared_server.run_anchor", lambda: run)
    root = tmp_path / "registry"
    with ReferenceShared(SPEC, tmp_path / "serve.log", "serve", fresh=True, root=root) as first:
        assert first.startup_s > 0 and first.started_by == "serve"
        assert served(first.base_url)
        state = read_state(registry_dir(SPEC, run, root))
    with ReferenceShared(SPEC, tmp_path / "fidelity.log", "client_fidelity", root=root) as second:
        assert second.base_url == first.base_url  # found, not started
        assert second.startup_s is None and second.started_by == "serve"
        assert served(second.base_url) and second.alive()
    assert "(from its start)" in (tmp_path / "serve.log").read_text()
    assert "reference server for reference" in (tmp_path / "serve.log").read_text()
    fidelity_log = (tmp_path / "fidelity.log").read_text()
    assert "`client_fidelity` held it, from byte" in fidelity_log
    assert "reference server for" not in fidelity_log  # its own part only
    # Another engine configuration is another server, and no idle one stays beside it.
    other = SPEC.with_engine(max_model_len=256)
    with ReferenceShared(other, tmp_path / "other.log", "slo_capacity", root=root) as third:
        assert third.base_url != first.base_url and served(third.base_url)
        assert stopped(state) and port_is_free(state["port"])
        other_state = read_state(registry_dir(other, run, root))
    # A stage that needs a fresh server stops the one that served others.
    with ReferenceShared(SPEC, tmp_path / "again.log", "serve", fresh=True, root=root) as fresh:
        assert fresh.base_url != first.base_url and fresh.startup_s > 0
        assert stopped(other_state) and port_is_free(other_state["port"])
        restarted = read_state(registry_dir(SPEC, run, root))
    # A fresh start stops a server that served others.
    with ReferenceShared(SPEC, tmp_path / "fidelity2.log", "client_fidelity", root=root) as reused:
        assert reused.base_url == fresh.base_url
    with ReferenceShared(SPEC, tmp_path / "again2.log", "serve", fresh=True, root=root) as fresh:
        assert stopped(restarted) and port_is_free(restarted["port"])
        restarted = read_state(registry_dir(SPEC, run, root))
    # The run ends: every server it started stops, its port is free, nothing is left.
    run.kill()
    assert wait_until(lambda: stopped(restarted)), "the server outlived its run"
    assert port_is_free(restarted["port"]) and read_state(registry_dir(SPEC, run, root)) is None


def test_an_unused_server_stops_after_the_idle_time_and_the_next_stage_starts_one(tmp_path, run, monkeypatch):
    monkeypatch.setattr("infbench.engines.shared_server.run_anchor", lambda: run)
    root = tmp_path / "registry"
    with ReferenceShared(SPEC, tmp_path / "a.log", "serve", root=root, idle_s=1.0) as first:
        state = read_state(registry_dir(SPEC, run, root))
        time.sleep(2.0)  # held longer than the idle time: still up
        assert served(first.base_url)
    assert wait_until(lambda: stopped(state), 15), "the idle server did not stop"
    with ReferenceShared(SPEC, tmp_path / "b.log", "slo_capacity", root=root, idle_s=1.0) as second:
        assert second.startup_s > 0 and served(second.base_url)
        later = read_state(registry_dir(SPEC, run, root))
    stop_all(root, anchor=run)  # the Snakefile's onsuccess / onerror
    assert stopped(later) and port_is_free(later["port"])


def test_one_stage_at_a_time_other_stages_stop_it_and_a_failed_stage_stops_it(tmp_path, run, monkeypatch):
    monkeypatch.setattr("infbench.engines.shared_server.run_anchor", lambda: run)
    monkeypatch.chdir(tmp_path)  # stop_idle looks in the working directory's registry, as in a run
    entered = threading.Event()

    def second_stage():
        with ReferenceShared(SPEC, tmp_path / "b.log", "slo_capacity"):
            entered.set()

    with ReferenceShared(SPEC, tmp_path / "a.log", "serve") as first:
        state = read_state(first.folder)
        waiting = threading.Thread(target=second_stage)
        waiting.start()
        assert not entered.wait(1.5), "a second stage measured the server while the first held it"
    waiting.join(30)
    assert entered.is_set() and not stopped(state)
    stop_idle("slo_capacity", measuring=True)  # a stage that shares it leaves it up
    stop_idle("kv_validation", measuring=False)  # so does an analysis running beside the serving stages
    stop_idle(None, measuring=True)  # outside Snakemake: nothing to stop
    assert not stopped(state)
    with ReferenceShared(SPEC, tmp_path / "held.log", "slo_capacity"):
        stop_idle("hf_baseline", measuring=True)  # never under a stage that holds it
        assert not stopped(state)
    stop_idle("hf_baseline", measuring=True)  # any other measuring stage stops it before it measures
    assert stopped(state) and port_is_free(state["port"])
    with pytest.raises(RuntimeError), ReferenceShared(SPEC, tmp_path / "c.log", "serve") as failing:
        broken = read_state(failing.folder)
        raise RuntimeError("the stage failed")
    assert stopped(broken), "a failed stage left its server to the next"


def test_a_stage_run_outside_snakemake_stops_its_server_on_leaving(tmp_path):
    root = tmp_path / "registry"
    with ReferenceShared(SPEC, tmp_path / "a.log", "client_fidelity", root=root) as server:
        state = read_state(server.folder)
        assert served(server.base_url)
    assert stopped(state) and port_is_free(state["port"])


def test_a_server_that_fails_to_start_fails_the_stage_with_its_log_and_leaves_nothing(tmp_path, run, monkeypatch):
    monkeypatch.setattr("infbench.engines.shared_server.run_anchor", lambda: run)
    root = tmp_path / "registry"
    with pytest.raises(ServerError, match="exited with code 3") as error:
        with FailingShared(SPEC, tmp_path / "a.log", "serve", root=root):
            pass
    assert "no such model here" in str(error.value)
    assert "(from its start)" in (tmp_path / "a.log").read_text()
    assert read_state(registry_dir(SPEC, run, root))["status"] == "failed"
    assert not [p for p in psutil.Process().children(recursive=True) if "shared_server" in " ".join(p.cmdline())]


def test_the_pipelines_serving_stages_measured_one_server(tiny_run):
    """In the tiny pipeline run, serve started the server (a fresh one), client fidelity and the
    capacity search used it, each stage's server log holds its part, and nothing was left
    running after the run."""
    logs = tiny_run / "logs"
    assert "(from its start)" in (logs / "serve/tiny.server.log").read_text()
    for stage in ("client_fidelity", "slo_capacity"):
        assert f"`{stage}` held it, from byte" in (logs / f"{stage}/tiny.server.log").read_text()
        assert "started for serve" in (logs / f"{stage}/tiny.log").read_text(), stage
    left = [
        p
        for p in psutil.process_iter(["cmdline", "cwd"])
        if "infbench.engines.shared_server" in " ".join(p.info["cmdline"] or []) and p.info["cwd"] == str(tiny_run)
    ]
    assert not left, "a shared server outlived the run"


def test_stages_that_name_the_model_folder_differently_share_one_key(tmp_path, monkeypatch):
    """serve and slo_capacity pass the model folder relative to the run, client fidelity passes
    it resolved: the same server either way."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "resources/models/m").mkdir(parents=True)
    relative = dataclasses.replace(SPEC, model_dir="resources/models/m")
    absolute = dataclasses.replace(SPEC, model_dir=str(tmp_path / "resources/models/m"))
    assert server_key(relative) == server_key(absolute)
    assert server_key(relative) != server_key(relative.with_engine(max_model_len=256))
