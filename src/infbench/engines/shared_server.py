"""One vLLM server per engine configuration for the serving stages of one Snakemake run.

The serving levels (`serve`), client fidelity and the SLO capacity search measure the same
server: the first of them to run starts it, the next find it and use it. Each rule keeps its
own inputs and rerun triggers: a change to the capacity settings reruns only the capacity
search, which then starts a server itself. A stage can ask for a fresh server (`serve` does:
its study request is the server's first, cold request), as does every stage when prefix
caching is on; a server that has served others is then stopped and a new one started.

Why not a Snakemake service job: Snakemake runs a service and all its consumers at once (the
three stages would load one server together) and reruns every consumer whenever the service
runs, so a capacity change would rerun the serving levels too (seen with Snakemake 9.27).

How. A supervisor process per server (`python -m infbench.engines.shared_server DIR`) owns the
`VLLMServer` (its own process group, which gets SIGTERM if the supervisor dies) and writes
DIR/state.json once the server is ready. A stage holds an exclusive lock on DIR/lease while it
measures (the kernel drops it if the stage dies). The supervisor stops the server when the
lease has been free for `IDLE_S` seconds, when the run it belongs to (the nearest `snakemake`
process above the stage, or the stage itself outside Snakemake) has ended, on
SIGTERM, or when the Snakefile's `onsuccess`/`onerror` handlers call `stop_all`. Servers are
never shared between runs: the registry folder is per run. On a cluster each job is its own
run, so there each stage starts its own server, as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from infbench.engines.servers import ServerSpec
from infbench.engines.settings import engine_env
from infbench.engines.vllm_server import ServerError, VLLMServer, free_port, server_command

REGISTRY = Path(".snakemake") / "shared-servers"
# The rules that share the server: PRIORITY in workflow/rules/common.smk names the same three.
SHARING_STAGES = frozenset({"serve", "client_fidelity", "slo_capacity"})
IDLE_S = 30.0  # a free lease this long stops the server (Snakemake starts the next job in seconds)
POLL_S = 0.5


def run_anchor(pid: int | None = None) -> psutil.Process:
    """The process whose life bounds a shared server's: the nearest `snakemake` process above
    `pid` (the run executing the stage: a workflow that runs the pipeline as a job is another
    run), else `pid`'s own process (a script run outside Snakemake)."""
    own = psutil.Process(pid or os.getpid())
    for parent in own.parents():
        try:
            command = parent.cmdline()
        except psutil.Error:
            continue
        if any(Path(arg).name == "snakemake" for arg in command[:3]):
            return parent
    return own


def _alive(pid: int, created: float) -> bool:
    """The process that had this pid at that time still runs (a zombie has ended)."""
    try:
        process = psutil.Process(pid)
        return abs(process.create_time() - created) < 0.01 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def server_key(spec: ServerSpec) -> str:
    """What makes two servers the same: the command without its port, the environment the
    engine gets, the host."""
    resolved = dataclasses.replace(spec, model_dir=os.path.realpath(spec.model_dir))  # stages pass it either way
    command = server_command(resolved.engine_args(), "127.0.0.1", 0, spec.served_name, spec.flags or None)
    env = {**engine_env(spec.threads, spec.device), **spec.env}
    text = json.dumps({"command": command, "env": env, "host": socket.gethostname()}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def registry_dir(spec: ServerSpec, anchor: psutil.Process, root: Path = REGISTRY) -> Path:
    return root / f"{anchor.pid}-{int(anchor.create_time())}" / server_key(spec)


@contextlib.contextmanager
def _locked(path: Path, mode: int):
    with open(path, "a+") as handle:
        fcntl.flock(handle, mode)
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_state(folder: Path) -> dict | None:
    """The running server's state, or None where there is none (never started, stopped, or
    its supervisor gone)."""
    try:
        state = json.loads((folder / "state.json").read_text())
    except (OSError, ValueError):
        return None
    if state.get("status") == "ready" and not _alive(state["supervisor_pid"], state["supervisor_created"]):
        return None
    return state


def _write_state(folder: Path, state: dict) -> None:
    part = folder / "state.json.part"
    part.write_text(json.dumps(state, indent=1))
    part.replace(folder / "state.json")


def _stop_supervisor(state: dict, timeout_s: float = 60.0) -> None:
    """SIGTERM the supervisor (it stops its server) and wait for it to exit."""
    pid, created = state["supervisor_pid"], state["supervisor_created"]
    if not _alive(pid, created):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid, created) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid, created):  # its server gets SIGTERM from the kernel when it dies
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class SharedServer:
    """A server of `spec` shared with the run's other stages, entered with `with`: it is started
    (or found) on entering and leased until leaving. Has what the stages use of a
    `VLLMServer`: base_url, served_name, api_key, host, command, startup_s (None where the
    server was found running), alive(), log_tail(). On leaving, the server's log lines written
    while this stage held it (from the start for the stage that started it) are copied to
    `log_path`."""

    metrics = True

    def __init__(
        self,
        spec: ServerSpec,
        log_path: str | Path,
        stage: str,
        fresh: bool = False,
        root: Path = REGISTRY,
        idle_s: float = IDLE_S,
    ):
        self.spec = spec
        self.idle_s = idle_s
        self.log_path = Path(log_path)
        self.stage = stage
        # With prefix caching on, a stage would read prompts an earlier one left in the cache.
        self.fresh = fresh or bool(spec.engine.get("enable_prefix_caching"))
        self.anchor = run_anchor()
        self.folder = registry_dir(spec, self.anchor, Path(root))
        self.host = "127.0.0.1"
        self.served_name = spec.served_name
        self.api_key = spec.flags.get("api_key")
        self.startup_s: float | None = None
        self.started_by: str | None = None
        self.command: list[str] | None = None
        self.base_url: str | None = None
        self._lease = None
        self._state: dict | None = None
        self._log_from = 0
        # The server's own log, kept in the registry while it runs: one per server, so that a
        # server still stopping never writes into its successor's.
        self.server_log: Path | None = None

    def __enter__(self) -> SharedServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        stop_all(self.folder.parent.parent, self.anchor, keep=self.folder)  # other engines' servers
        with _locked(self.folder / "start.lock", fcntl.LOCK_EX):
            # Exclusive: one stage measures the server at a time, whatever bench_slot allows,
            # and a fresh start never stops a server another stage holds.
            self._lease = open(self.folder / "lease", "a+")
            fcntl.flock(self._lease, fcntl.LOCK_EX)
            try:
                state = self._find_or_start()
            except BaseException:
                self._copy_log()
                self._release()
                raise
        self._state = state
        self.base_url = state["base_url"]
        self.command = state["command"]
        return self

    def _find_or_start(self) -> dict:
        """Under the start lock and the lease: the running server, or a new one."""
        state = read_state(self.folder)
        if state and state["status"] == "ready" and self.fresh:
            served = ", ".join(state["stages"]) or "no stage"
            print(f"stopping the server that served {served}: this stage needs a fresh one")
            _stop_supervisor(state)
            state = None
        if state and state["status"] == "ready":
            self.server_log = Path(state["log_path"])
            self._log_from = self.server_log.stat().st_size if self.server_log.exists() else 0
            self.started_by = state["stages"][0] if state["stages"] else "a stage that left no name"
            print(f"using the server {state['base_url']} started for {self.started_by}")
        else:
            # A server still stopping (retired when idle, or by another stage) is gone first:
            # two never run at once.
            _stop_supervisors(self.folder)
            state = self._launch()
            self.startup_s = state["startup_s"]
            self.started_by = self.stage
        state["stages"].append(self.stage)
        _write_state(self.folder, state)
        return state

    def server_command(self, port: int) -> list[str]:
        """The server's command line (the tests stand the reference server here)."""
        return server_command(self.spec.engine_args(), self.host, port, self.spec.served_name, self.spec.flags or None)

    def _launch(self) -> dict:
        """Start a supervisor and wait until its server is ready or failed."""
        with contextlib.suppress(FileNotFoundError):
            (self.folder / "state.json").unlink()
        port = free_port(self.host)
        self.server_log = self.folder / f"server-{port}.log"
        request = {
            "command": self.server_command(port),
            "port": port,
            "served_name": self.spec.served_name,
            "api_key": self.api_key,
            "env": {**engine_env(self.spec.threads, self.spec.device), **self.spec.env},
            "startup_timeout_s": self.spec.startup_timeout_s,
            "log_path": str(self.server_log),
            "anchor_pid": self.anchor.pid,
            "anchor_created": self.anchor.create_time(),
            "idle_s": self.idle_s,
        }
        (self.folder / "request.json").write_text(json.dumps(request, indent=1))
        with open(self.folder / "supervisor.log", "a") as log:
            supervisor = subprocess.Popen(
                [sys.executable, "-m", "infbench.engines.shared_server", str(self.folder)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.spec.startup_timeout_s + 60
        try:
            while True:
                exited = supervisor.poll() is not None  # before reading: its last state is then written
                state = read_state(self.folder)
                if state and state["status"] == "failed":
                    raise ServerError(state["error"])
                if state and state["status"] == "ready":
                    return state
                if exited:
                    raise ServerError(
                        f"the server's supervisor exited with code {supervisor.returncode} before the server was "
                        f"ready; see {self.folder / 'supervisor.log'} and {self.server_log}"
                    )
                if time.monotonic() > deadline:
                    raise ServerError(f"no server after {self.spec.startup_timeout_s:.0f} s; see {self.server_log}")
                time.sleep(0.2)
        except BaseException:
            # Interrupted or failed while starting: nothing may be left starting behind us.
            supervisor.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                supervisor.wait(timeout=60)
            raise

    def alive(self) -> bool:
        state = read_state(self.folder)
        if not (state and state["status"] == "ready"):
            return False
        try:
            return psutil.Process(state["server_pid"]).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.server_log.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AttributeError):
            return "(no server log)"

    def __exit__(self, exc_type, *exc) -> None:
        try:
            self._copy_log()
            # Outside Snakemake nothing comes next, and a stage that failed may leave a broken
            # server: stop it now, before the lease passes to a stage that would measure it.
            if self._state and (self.anchor.pid == os.getpid() or exc_type is not None):
                _stop_supervisor(self._state)
        finally:
            self._release()

    def _release(self) -> None:
        if self._lease is not None:
            fcntl.flock(self._lease, fcntl.LOCK_UN)
            self._lease.close()
            self._lease = None

    def _copy_log(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        header = (
            f"# the server's log while `{self.stage}` held it"
            + (" (from its start)" if self._log_from == 0 else f", from byte {self._log_from} of {self.server_log}")
            + "\n"
        )
        try:
            with open(self.server_log, "rb") as source:
                source.seek(self._log_from)
                text = source.read().decode(errors="replace")
        except (OSError, TypeError):
            text = "(no server log)\n"
        self.log_path.write_text(header + text)


def stop_all(root: Path = REGISTRY, anchor: psutil.Process | None = None, keep: Path | None = None) -> None:
    """Stop every idle shared server of this run, starting, ready or stopping, and wait until
    each is gone; all but `keep` (a server's folder) and those a stage holds (it is measuring:
    only a run that lets measurements overlap gets here). Called by the Snakefile's
    onsuccess/onerror handlers, by every other measuring stage before it measures
    (core/stage.py: an idle server must not share the machine with it), and by a shared stage
    for other engines' servers."""
    anchor = anchor or psutil.Process()
    run = Path(root) / f"{anchor.pid}-{int(anchor.create_time())}"
    for folder in {marker.parent for marker in run.glob("*/supervisor-*.json")} - {keep}:
        with open(folder / "lease", "a+") as lease:
            if _take(lease, tries=10):  # the supervisor's own probe holds it for microseconds
                _stop_supervisors(folder)


def _stop_supervisors(folder: Path) -> None:
    """Stop every supervisor of this server's folder, starting, ready or still stopping (each
    marks itself in a file of its own), and wait until each is gone."""
    for marker in folder.glob("supervisor-*.json"):
        with contextlib.suppress(OSError, ValueError):
            _stop_supervisor(json.loads(marker.read_text()))


def stop_idle(stage: str | None, measuring: bool) -> None:
    """Before a measuring stage (one holding `bench_slot`) of a Snakemake run that does not use
    the shared server: stop the run's idle shared servers, so that none shares the machine
    with a measurement. Analysis stages run beside the serving stages and stop nothing."""
    if stage is not None and measuring and stage not in SHARING_STAGES:
        stop_all(anchor=run_anchor())


def supervise(folder: Path) -> int:
    """The supervisor: start the server, publish its state, stop it when it is no longer needed."""
    request = json.loads((folder / "request.json").read_text())
    me = psutil.Process()
    server = VLLMServer(
        {},
        request["served_name"],
        request["log_path"],
        env=request["env"],
        startup_timeout_s=request["startup_timeout_s"],
        port=request["port"],
    )
    server.command = request["command"]
    server.api_key = request["api_key"]

    def _terminate(signum, frame):
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    marker = folder / f"supervisor-{me.pid}.json"  # its own: a successor's is never removed with it
    marker.write_text(json.dumps({"supervisor_pid": me.pid, "supervisor_created": me.create_time()}))
    ready = False
    try:
        try:
            server.start()
        except ServerError as error:
            _write_state(folder, {"status": "failed", "error": str(error)})  # kept: the stage reads it
            return 1
        ready = True
        _write_state(
            folder,
            {
                "status": "ready",
                "base_url": server.base_url,
                "port": server.port,
                "startup_s": server.startup_s,
                "command": server.command,
                "log_path": str(server.log_path),
                "server_pid": server.process.pid,
                "supervisor_pid": me.pid,
                "supervisor_created": me.create_time(),
                "stages": [],
            },
        )
        print(f"server ready on {server.base_url} after {server.startup_s:.1f} s", flush=True)
        reason = _wait_until_unneeded(folder, server, request)
        print(f"stopping the server: {reason}", flush=True)
    finally:
        # A second signal must not cut the stop short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if ready:
            with contextlib.suppress(FileNotFoundError):
                (folder / "state.json").unlink()
        server.stop()
        marker.unlink(missing_ok=True)
    return 0


def _wait_until_unneeded(folder: Path, server: VLLMServer, request: dict) -> str:
    idle_since = None
    with open(folder / "lease", "a+") as lease:
        while True:
            if not _alive(request["anchor_pid"], request["anchor_created"]):
                return "the run that started it has ended"
            if not server.alive():
                return f"the server exited with code {server.process.returncode}"
            if _free(lease):
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since >= request["idle_s"] and _retire(folder, lease):
                    return f"no stage has used it for {request['idle_s']:.0f} s"
            else:
                idle_since = None
            time.sleep(POLL_S)


def _retire(folder: Path, lease) -> bool:
    """Withdraw the state while holding the start lock, so that no stage finds the server
    while it stops; False when a stage is starting or holds the lease."""
    with open(folder / "start.lock", "a+") as start:
        try:
            fcntl.flock(start, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if not _free(lease):
            return False
        (folder / "state.json").unlink()
        return True


def _take(lease, tries: int) -> bool:
    """Take the lease exclusively without waiting on a stage: `tries` attempts 0.1 s apart."""
    for attempt in range(tries):
        try:
            fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt < tries - 1:
                time.sleep(0.1)
    return False


def _free(lease) -> bool:
    """True when no stage holds the lease (taken and dropped at once)."""
    if not _take(lease, tries=1):
        return False
    fcntl.flock(lease, fcntl.LOCK_UN)
    return True


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1])))
