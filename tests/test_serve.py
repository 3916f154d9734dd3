"""The serve stage with a real vLLM server and the real openai client, and its failures:
every one ends with a clear error, no process left in the server's group, no port bound."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import REPO, reference_mean_interval, snakemake, tiny_config, write_config

from infbench.core.artifacts import read_json, validate
from infbench.core.level_names import level_name
from infbench.engines.settings import engine_env, vllm_engine_args
from infbench.engines.vllm_server import ServerError, VLLMServer, free_port, port_is_free
from infbench.serving.reference_server import ReferenceServer, Schedule

VLLM_FIELDS = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_concurrency",
    "request_rate",
    *(f"{stat}_{metric}_ms" for stat in ("mean", "median", "std", "p99") for metric in ("ttft", "tpot", "itl", "e2el")),
)


def processes() -> list[tuple[int, int, str, str]]:
    """(pid, process group, state, command line) of every process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found.append((int(entry.name), int(fields[2]), fields[0], cmdline))
    return found


def server_group(port: str, program: str = "vllm.entrypoints") -> int:
    """The process group of the server listening on `port` (it leads its own group)."""
    leaders = [pgid for pid, pgid, state, cmd in processes() if program in cmd and f"--port {port} " in cmd + " "]
    assert leaders, f"no {program} server on port {port}"
    return leaders[0]


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of the group: the API server and its engine core."""
    return [pid for pid, group, state, _ in processes() if group == pgid and state != "Z"]


def wait_gone(pgid: int, timeout_s: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and group_members(pgid):
        time.sleep(0.5)
    return group_members(pgid)


def wait_for_line(path: Path, pattern: str, timeout_s: float = 300) -> re.Match:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and (match := re.search(pattern, path.read_text(errors="replace"))):
            return match
        time.sleep(0.5)
    raise AssertionError(f"{pattern!r} never appeared in {path}")


def test_serve_artifacts(tiny_run):
    server, load = read_json(tiny_run / "results/tiny/server.json"), read_json(tiny_run / "results/tiny/load.json")
    validate(server, "server")
    validate(load, "load")
    assert server["host"] == "127.0.0.1" and server["startup_s"] > 0
    # Every level's requests in the table beside load.json, read back as a user would.
    import pandas

    table = pandas.read_csv(tiny_run / "results/tiny/load.requests.csv")
    assert load["requests_table"]["file"] == "load.requests.csv" and len(table) == load["requests_table"]["rows"]
    assert table["counted"].sum() == sum(len(r["requests"]) for level in load["levels"] for r in level["repeats"])
    assert len(table) - table["counted"].sum() == sum(
        len(r["uncounted_requests"]) for level in load["levels"] for r in level["repeats"]
    )
    assert set(table["measurement"]) == {level_name(level) for level in load["levels"]}
    done = table[table["success"]]
    assert ((done["first_token_s"] > done["sent_s"]) & (done["last_token_s"] >= done["first_token_s"])).all()
    assert (
        server["kv"]["num_blocks"]
        == read_json(tiny_run / "results/tiny/vllm_offline.json")["engine_facts"]["num_blocks"]
    )
    study = server["study_request"]
    assert study["cold"]["prompt_tokens"] == 7 and study["cold"]["completion_tokens"] == 50  # as in the study
    assert len(study["warm"]) == 2
    levels = {
        (level["api"], level["mode"], level["max_concurrency"], level["request_rate"]): level
        for level in load["levels"]
    }
    assert set(levels) == {
        ("completions", "concurrency", 1, "inf"),
        ("completions", "concurrency", 4, "inf"),
        ("completions", "request_rate", 4, 4.0),
        ("completions", "ramp", 4, 2.0),
        ("chat", "concurrency", 4, "inf"),
        ("chat", "users", 4, "inf"),  # 4 users in chat sessions (load.users)
        ("chat", "session_ramp", None, 2.0),  # sessions starting at 2 to 8 a second (load.session_ramp)
    }
    # vLLM's schedule at 4 req/s, of which a window counts 8 sends or more: (n - 1) / their span.
    assert 2.5 < levels[("completions", "request_rate", 4, 4.0)]["offered_request_rate"] < 6.0
    assert levels[("completions", "ramp", 4, 2.0)]["ramp_end_rate"] == 16.0
    peaks = {}
    for key, level in levels.items():
        cap = key[2]
        for repeat in level["repeats"]:
            # Requests in flight, from the client's own send and end times, never exceed the cap.
            requests = repeat["requests"]
            events = sorted(
                [(r["sent_s"], 1) for r in requests] + [(r["sent_s"] + r["e2el"], -1) for r in requests],
                key=lambda event: (event[0], event[1]),
            )
            in_flight = peak = 0
            for _, change in events:
                in_flight += change
                peak = max(peak, in_flight)
            assert cap is None or peak <= cap, (level["mode"], cap, peak)
            peaks[key] = max(peaks.get(key, 0), peak)
    # The closed loops of 4 did run requests side by side.
    assert peaks[("completions", "concurrency", 4, "inf")] >= 2 and peaks[("chat", "concurrency", 4, "inf")] >= 2
    assert load["client_placement"]["client_cpus"]
    for level in load["levels"]:
        assert all(field in level for field in VLLM_FIELDS)
        windowed = level["mode"] not in ("ramp", "session_ramp")
        # Two passes: a windowed level counts 8 requests a pass or more (load.window_requests),
        # the ramp its 16 (load.ramp.requests), the session ramp every turn of its 8 sessions of up
        # to 3 turns; all pooled in the level's vLLM fields.
        assert len(level["repeats"]) == 2
        counted = [len(r["requests"]) for r in level["repeats"]]
        if level["mode"] == "ramp":
            assert counted == [16, 16]
        elif level["mode"] == "session_ramp":
            assert all(8 <= n <= 24 for n in counted)
        else:
            assert all(n >= 8 for n in counted)
        assert level["completed"] == sum(counted) and level["failed"] == 0
        assert level["total_output_tokens"] == sum(r["total_output_tokens"] for r in level["repeats"])
        across = level["across_repeats"]["output_throughput"]
        expected = reference_mean_interval([r["output_throughput"] for r in level["repeats"]])
        assert across["n"] == 2
        # Relative to the interval's width as well: an end can lie near zero.
        tolerance = {"rel": 1e-4, "abs": 1e-6 * (expected[2] - expected[1])}
        assert (across["mean"], across["ci95_low"], across["ci95_high"]) == pytest.approx(expected, **tolerance)
        assert level["percentile_support"]["ttft"]["n"] == sum(counted)
        assert {c["name"] for c in level["checks"]} >= {
            "failed_requests",
            "short_outputs",
            "usage_vs_retokenized",
            "client_ceiling",
            "prefix_cache_hit_rate",
            "metrics_coverage",
            "repeats_agree",
            "breakdown_same_requests",
        } | ({"steady_window"} if windowed else set())
        # vLLM timed every request each pass finished (a windowed pass drains its uncounted ones
        # too); per request its intervals nest inside the client's: the engine core's inside
        # vLLM's TTFT and E2E latency, vLLM's inside the client's.
        finished = [r for repeat in level["repeats"] for r in repeat["requests"] + repeat["uncounted_requests"]]
        split = level["time_breakdown"]
        assert split["check"]["status"] == "pass" and split["server_counts"] == dict.fromkeys(
            split["server_counts"], len(finished)
        )
        ttft, e2el = split["ttft_ms"], split["e2el_ms"]
        assert ttft["engine_prefill"] > 0 and e2el["engine_decode"] > 0 and split["tpot_ms"]["engine"] > 0
        for parts, latency in ((ttft, "ttft"), (e2el, "e2el")):
            assert parts["api_server_and_intake"] > 0 and parts["after_vllm"] > 0, (latency, parts)
            assert parts["client"] == pytest.approx(sum(r[latency] for r in finished) / len(finished) * 1000)
        assert not [c for c in level["checks"] if c["status"] == "fail"]
        for repeat in level["repeats"]:
            assert any("vllm:kv_cache_usage_perc" in sample for sample in repeat["metrics_series"])
            # One scrape just before the pass and one just after it bound the counters' deltas.
            series = repeat["metrics_series"]
            window = repeat["window"]
            assert series[0]["t"] <= 0 <= (window["closed_s"] if windowed else repeat["duration"]) <= series[-1]["t"]
            if windowed:
                # Counted: sent while the window was open; drained: every request sent finished.
                assert all(window["opened_s"] <= r["sent_s"] <= window["closed_s"] for r in repeat["requests"])
                assert window["finished"] == window["sent"] == len(repeat["requests"] + repeat["uncounted_requests"])
                ids = [r["request_id"].split("#")[0] for r in repeat["requests"] + repeat["uncounted_requests"]]
                if level["mode"] != "users":
                    assert len(ids) == len(set(ids)) and all(i.startswith("pool-") for i in ids)  # distinct pool rows
            for request in repeat["requests"]:
                assert request["success"] and request["ttft"] <= request["e2el"]
                # One gap per streamed chunk after the first; a chunk may carry several tokens
                # (as in vLLM's benchmark, ITL is per chunk), and `usage` counts the tokens. The
                # chat endpoint's first chunk carries only the role, so it may have one gap more.
                role_chunk = level["api"] == "chat"
                assert 1 <= len(request["itl"]) <= request["output_tokens"] - 1 + role_chunk
                assert min(request["itl"]) >= 0
            assert sum(r["output_tokens"] for r in repeat["requests"]) == repeat["total_output_tokens"]
    assert levels[("completions", "concurrency", 4, "inf")]["peak_num_requests_running"] >= 2
    # The users level on vLLM: every turn a user's, carrying the conversation so far (a later
    # turn of a conversation has the longer prompt), each pass read through Little's law.
    users = levels[("chat", "users", 4, "inf")]
    for repeat in users["repeats"]:
        turns = sorted(repeat["requests"] + repeat["uncounted_requests"], key=lambda r: r["sent_s"])
        assert all(r["user"] in range(4) and r["turn"] >= 1 and r["think_s"] >= 0 for r in turns)
        by_conversation = {}
        for turn in turns:
            by_conversation.setdefault(turn["request_id"].split("#")[1], []).append(turn)
        held = [t for t in by_conversation.values() if len(t) > 1]
        assert held and all(
            [r["turn"] for r in t] == sorted(r["turn"] for r in t)
            and all(a["prompt_tokens"] < b["prompt_tokens"] for a, b in zip(t, t[1:]))
            for t in held
        )
        assert repeat["sessions"]["users"] == 4 and repeat["sessions"]["turns"] == len(repeat["requests"])
        # Windows of about 1 s, a few cycles of 0.5 s thought: Little's law reads low there
        # (docs/method.md#sessions), so only a gross error is caught.
        assert 4 * 0.3 < repeat["sessions"]["users_from_littles_law"] < 4 * 1.4
        assert {c["name"] for c in repeat["checks"]} >= {"users_held", "users_on_time"}
    # The session ramp on vLLM: 8 sessions a pass, each a user of its own holding one conversation
    # from its first turn to its end, their starts on schedule.
    ramp = levels[("chat", "session_ramp", None, 2.0)]
    assert ramp["ramp_end_rate"] == 8.0 and level_name(ramp) == "sessions 2-8/s"
    for repeat in ramp["repeats"]:
        sessions = {}
        for turn in sorted(repeat["requests"], key=lambda r: r["sent_s"]):
            sessions.setdefault(turn["user"], []).append(turn["turn"])
        assert sorted(sessions) == list(range(8)) and all(t == list(range(1, len(t) + 1)) for t in sessions.values())
        assert "send_lag" in {c["name"] for c in repeat["checks"]}  # its threshold is the request ramp's
    port = server["command"][server["command"].index("--port") + 1]
    assert not [cmd for _, _, state, cmd in processes() if f"--port {port} " in cmd + " " and state != "Z"], (
        "the server outlived its rule"
    )


def test_chat_level_runs_each_prompt_through_the_chat_template(tiny_run):
    """The chat level sends pool rows' messages to /v1/chat/completions: the server's prompt
    count for each is the model's chat template around that user turn, token for token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_run / "resources/models/tiny")
    pool = {r["id"]: r for r in map(json.loads, (tiny_run / "results/tiny/request_pool.jsonl").open())}
    load = read_json(tiny_run / "results/tiny/load.json")
    chat = next(level for level in load["levels"] if level["api"] == "chat")
    for request in chat["repeats"][0]["requests"]:
        row = pool[request["request_id"].split("#")[0]]
        templated = tokenizer.apply_chat_template(row["messages"], tokenize=False, add_generation_prompt=True)
        assert request["prompt_tokens"] == len(tokenizer(templated, add_special_tokens=False)["input_ids"])
        assert request["prompt_tokens"] > row["prompt_tokens"]  # the row's prompt as completions sends it
    assert chat["failed"] == 0 and not [c for c in chat["checks"] if c["status"] == "fail"]


@pytest.mark.slow  # starts vLLM's server process (about 8 s until it exits): the fast group stays under a minute
def test_bad_model_path_fails_fast_and_cleanly(tmp_path, default_config):
    args = vllm_engine_args(tmp_path / "no-such-model", "float32", default_config["engine"], 0, "cpu")
    server = VLLMServer(args, "missing", tmp_path / "server.log", env=engine_env(2, "cpu"), startup_timeout_s=180)
    started = time.monotonic()
    with pytest.raises(ServerError) as caught:
        server.start()
    assert time.monotonic() - started < 180
    assert "exited with code" in str(caught.value) and "server.log" in str(caught.value)
    assert not group_members(server.process.pid)
    assert port_is_free(server.port)


def test_port_in_use_is_refused_before_starting(tmp_path, tiny_model, default_config):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        args = vllm_engine_args(tiny_model, "float32", default_config["engine"], 0, "cpu")
        server = VLLMServer(args, "tiny", tmp_path / "server.log", port=port, startup_timeout_s=60)
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            server.start()
        assert server.process is None


def test_a_chosen_port_taken_before_the_server_binds_it_is_exchanged_for_another(tmp_path, monkeypatch):
    """The race free_port leaves open: the port it chose is free when looked at and taken when
    the server binds it (planted: a listener holds it, and the first look says it is free)."""
    import infbench.engines.vllm_server as vllm_server

    looks = []

    def free_at_first(port, host="127.0.0.1"):
        looks.append(port)
        return len(looks) <= 1 or port_is_free(port, host)

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        chosen = iter([taken])
        monkeypatch.setattr(vllm_server, "free_port", lambda host: next(chosen, None) or free_port(host))
        monkeypatch.setattr(vllm_server, "port_is_free", free_at_first)
        with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=5, itl_ms=5)) as server:
            assert server.port != taken and f"--port {server.port}" in " ".join(server.command)
            assert httpx.get(f"{server.base_url}/v1/models").status_code == 200
        assert looks[:2] == [taken, taken]  # the first launch, then the lost port seen taken


def serve_workdir(tmp_path, tiny_model, window_s=1) -> Path:
    config = tiny_config(tiny_model, load={"concurrency": [4], "request_rates": [], "window_s": window_s})
    # Enough for the seconds these tests hold a level (c=4 sends about 25 requests a second), and
    # few enough that a killed server's level fails through its pool quickly.
    config["workload"]["pool_requests"] = 300
    write_config(tmp_path, config)
    snakemake(tmp_path, "--cores", "2", "results/tiny/workload.jsonl")
    return tmp_path


def start_snakemake(workdir: Path, target: str) -> subprocess.Popen:
    command = [
        str(Path(sys.executable).parent / "snakemake"),
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        "2",
        target,
    ]
    # A shell that starts a command in the background (`make test &`, nohup) makes it ignore
    # SIGINT, and children inherit that; reset it so Ctrl-C reaches Snakemake as at a terminal.
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_server_killed_mid_level_fails_the_rule_and_counts_failures(tmp_path, tiny_model):
    workdir = serve_workdir(tmp_path, tiny_model, window_s=600)
    run = start_snakemake(workdir, "results/tiny/load.json")
    log = workdir / "logs/serve/tiny.log"
    port = wait_for_line(log, r"server ready on http://127\.0\.0\.1:(\d+)").group(1)
    wait_for_line(log, r"study request")
    time.sleep(2)  # well inside the level
    pgid = server_group(port)
    assert len(group_members(pgid)) >= 2  # the API server and its engine core
    os.kill(pgid, signal.SIGKILL)  # the API server only; its engine core is orphaned
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode != 0
    assert re.search(
        r"stopped answering during the load level concurrency 4: \d+ of \d+ finished requests failed", stderr + stdout
    )
    assert not wait_gone(pgid, 30), "processes of the killed server survived"
    assert port_is_free(int(port))
    assert not (workdir / "results/tiny/load.json").exists()


# A stage as run_stage runs it, holding a server: what every server rule does. The stop is the
# same for every server (its whole process group, TERM then KILL); what is vLLM's own, an engine
# core left behind when its API server dies, is the killed-server test's above.
STAGE_HOLDING_A_SERVER = """
import sys, time
from types import SimpleNamespace
from infbench.core.stage import run_stage
from infbench.serving.reference_server import ReferenceServer

class Log(list):
    server = sys.argv[2]

def main(stage):
    with ReferenceServer("m", stage.log.server) as server:
        print(f"server ready on {server.base_url}", flush=True)
        time.sleep(300)

run_stage(main, SimpleNamespace(input={}, output={}, params={}, log=Log([sys.argv[1]])))
"""


# A SIGTERM whose interrupt Python drops: raised inside a finalizer (CI: an asyncio transport's
# __del__ in the SLURM-cancelled serve job), it is printed and the stage fails another way.
STAGE_INTERRUPTED_IN_A_FINALIZER = """
import os, signal, sys, time
from types import SimpleNamespace
from infbench.core.stage import run_stage

class Transport:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler's interrupt is raised here, in a finalizer: dropped

def main(stage):
    Transport()
    print("past the dropped interrupt", flush=True)
    raise RuntimeError("the server stopped answering")

run_stage(main, SimpleNamespace(input={}, output={}, params={}, log=[sys.argv[1]]))
"""


def test_a_stage_stopped_by_sigterm_says_interrupted_even_where_python_dropped_the_interrupt(tmp_path):
    driver = tmp_path / "stage.py"
    driver.write_text(STAGE_INTERRUPTED_IN_A_FINALIZER)
    log = tmp_path / "stage.log"
    run = subprocess.run([sys.executable, str(driver), str(log)], capture_output=True, text=True, timeout=60)
    assert "past the dropped interrupt" in log.read_text()  # else this test proves nothing
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("interrupted; partial outputs were removed")


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "ctrl-c-to-the-group"])
def test_a_stopped_stage_stops_its_server_and_says_so(tmp_path, how):
    """Ctrl-C (SIGINT), SIGTERM, and Ctrl-C at a terminal (SIGINT to the foreground group; the
    server leads a session of its own) unwind through the server's stop: the stage exits 1 with
    one line, its server's whole group is gone and its port free."""
    driver = tmp_path / "stage.py"
    driver.write_text(STAGE_HOLDING_A_SERVER)
    log = tmp_path / "stage.log"
    run = subprocess.Popen(
        [sys.executable, str(driver), str(log), str(tmp_path / "server.log")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    port = wait_for_line(log, r"server ready on http://127\.0\.0\.1:(\d+)", timeout_s=60).group(1)
    pgid = server_group(port, "reference_server")
    if how == "ctrl-c":
        os.kill(run.pid, signal.SIGINT)
    elif how == "sigterm":
        os.kill(run.pid, signal.SIGTERM)
    else:
        os.killpg(run.pid, signal.SIGINT)
    try:
        stdout, stderr = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        for group in (run.pid, pgid):
            os.killpg(group, signal.SIGKILL)
        raise
    assert run.returncode == 1, stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted; partial outputs were removed")
    assert not wait_gone(pgid, 30), f"server survived {how}"
    assert port_is_free(int(port))


def test_the_client_moves_off_the_engines_cores_where_there_are_others():
    """With the engine bound to the first CPU, the client process (every thread) moves to the
    others; with no other CPU it stays and says it shares them."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    probe = (
        "import json, os, threading; from infbench.engines.settings import place_client; "
        "threading.Thread(target=threading.Event().wait, daemon=True).start(); "
        "placement = place_client({threads}, 'cpu'); "
        "tasks = [sorted(os.sched_getaffinity(int(t))) for t in os.listdir('/proc/self/task')]; "
        "print(json.dumps({{**placement, 'tasks': tasks}}))"
    )
    moved = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe.format(threads=1)], capture_output=True, text=True, check=True
        ).stdout
    )
    assert moved["engine_cpus"] == allowed[:1] and moved["client_cpus"] == allowed[1:]
    assert not moved["client_shares_engine_cores"]
    assert all(cpus == allowed[1:] for cpus in moved["tasks"])
    shared = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe.format(threads=len(allowed))], capture_output=True, text=True, check=True
        ).stdout
    )
    assert shared["client_shares_engine_cores"] and "shares them" in shared["note"]
    assert all(cpus == allowed for cpus in shared["tasks"])
