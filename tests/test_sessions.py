"""Users in chat sessions (docs/method.md#sessions) on the reference server, whose schedule is
known and which counts a prompt a word a token: each user's turns carry the conversation so far
and follow the think time drawn, Little's law holds over a window, the users search finds a
capacity from Little's law's start; and the conversations read from ShareGPT (every turn) or
built from the workload."""

import asyncio
import json
import random
import re
import time
from collections import defaultdict

import pytest
from conftest import check_probes, searched
from timing import SchedulingJitter, waited_from

from infbench.capacity.checks import users_held
from infbench.capacity.measure import sessions_from_users, users_kv_limit
from infbench.capacity.probe import PassRecord, client_evidence, probe_record
from infbench.core.capacity_terms import capacity_text
from infbench.core.errors import UserError
from infbench.report.capacity import users_by_turn, users_view
from infbench.report.serve import turns_text
from infbench.serving.arrivals import Arrivals
from infbench.serving.level_checks import session_checks
from infbench.serving.reference_server import ReferenceServer, Schedule
from infbench.serving.request_table import probe_rows
from infbench.serving.sessions import SessionPlan, session_figures, session_plan
from infbench.serving.window import MeasuredPass, Window, open_loop_offsets, run_window
from infbench.workload.sessions import (
    MESSAGE_SLACK,
    Conversation,
    ThinkTime,
    Turn,
    sharegpt_conversations,
    synthetic_conversations,
    turn_footprints,
)

USER_WORDS = 4  # "question i k please"
SEND_COST_S = (
    0.003  # a session's first turn from its scheduled time (or the client's last other send) to its send, idle
)


class WordTokenizer:
    """A token a word, as the reference server counts them; decode joins words."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": text.split()}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(ids)


def conversations(count=60, turns=4, output=6, reply_words=3, system="you are helpful", outputs=None):
    """Conversations whose every turn asks USER_WORDS words and `output` tokens (or `outputs`, turn
    by turn), each recorded reply `reply_words` words, behind a system prompt of 3 words."""
    outputs = outputs or [output] * turns
    return [
        Conversation(
            f"c{i}",
            system,
            len(system.split()),
            tuple(
                Turn(f"question {i} {k} please", USER_WORDS, outputs[k], "b " * reply_words, reply_words)
                for k in range(len(outputs))
            ),
        )  # fmt: skip
        for i in range(count)
    ]


# load.json's sessions for the conversations above, as serve writes them.
SESSIONS_SETTINGS = {
    "think_s": 0.2,
    "think": "fixed",
    "reply": "model",
    "conversations": {"kind": "synthetic", "conversations": 60, "turns": 4, "system_prompt_tokens": 3},
}


def users_pass(server, plan, users=4, window=None, timeout_s=30, processes=1):
    window = window or Window(3.0, 30)
    return asyncio.run(
        run_window(server.base_url, "m", iter(()), window=window, concurrency=users, arrivals=None, seed=0,
                   interval_s=0.05, timeout_s=timeout_s, users=plan, processes=processes)
    )  # fmt: skip


def by_conversation(run) -> dict:
    """Each drawn conversation's turns (result, log) in turn order, keyed by its request id's draw."""
    held = defaultdict(list)
    for streamed, log in zip(run.results, run.turns):
        held[streamed.result.request_id.split("/")[0], streamed.result.request_id.split("#")[1]].append((streamed, log))
    return held


@pytest.mark.parametrize(
    ("reply", "think", "processes"), [("model", "fixed", 1), ("recorded", "exponential", 1), ("model", "fixed", 2)]
)
def test_each_turn_carries_the_conversation_so_far_and_follows_its_think_time(tmp_path, reply, think, processes):
    """From one client process, and with the turns streamed by two (load.client_processes)."""
    plan = SessionPlan(conversations(), ThinkTime(0.2, think), reply, 512)
    schedule = Schedule(ttft_ms=20, itl_ms=10, max_num_seqs=8)
    with ReferenceServer("m", tmp_path / "server.log", schedule) as server, SchedulingJitter() as jitter:
        run = users_pass(server, plan, window=Window(2.0, 24), processes=processes)
    assert run.processes == processes and len(run.process_cpu_s or [None]) == (3 if processes == 2 else 1)
    held = by_conversation(run)
    assert len(held) >= 4 and sum(run.counted) >= 24
    for turns in held.values():
        places = [log.turn for _, log in turns]
        assert places == list(range(places[0], places[0] + len(turns)))
        assert len({log.user for _, log in turns}) == 1  # one user holds a conversation
        # Its first turn sent: the system prompt, the earlier turns with their recorded replies
        # (a user's first conversation may begin part-way, a virtual history), and its question.
        assert turns[0][0].result.prompt_tokens == 3 + (places[0] - 1) * (USER_WORDS + 3) + USER_WORDS
        for (earlier, _), (later, _) in zip(turns, turns[1:]):
            carried = earlier.result.output_tokens if reply == "model" else 3  # the recorded reply's words
            assert later.result.prompt_tokens == earlier.result.prompt_tokens + carried + USER_WORDS
    # A user sends its next turn the drawn think time after its reply ended, never before it, and
    # later only by what the machine's scheduling delays in this same test allow.
    late_allowed = 0.01 + 2 * jitter.max_s
    ends = {}
    for streamed, log in zip(run.results, run.turns):
        if log.user in ends:
            waited = streamed.sent_at - ends[log.user]
            assert log.think_s - 0.002 <= waited <= log.think_s + late_allowed, (log, waited)
        ends[log.user] = log.ended_at
    figures = session_figures(run, 4)
    assert figures["users_from_littles_law"] == pytest.approx(4, rel=0.15)
    assert figures["mean_think_s"] == pytest.approx(figures["mean_think_drawn_s"], abs=late_allowed)
    # The request table names each turn's user, conversation, turn and think time, those cut off too.
    rows = probe_rows(run, mode="users", load=4, api="chat", burstiness=1.0, trace_scale=None, pass_number=1,
                      slo_ms={"ttft": 1000})  # fmt: skip
    assert {(r["measurement"], r["request_rate"], r["max_concurrency"]) for r in rows} == {("users=4", None, None)}
    assert all(r["user"] is not None and r["turn"] >= 1 and r["think_s"] is not None for r in rows)
    assert len(rows) == run.sent
    assert users_held(users_search((4, figures), window_s=2.0))["status"] == "pass"  # 7 cycles of 0.28 s


def test_users_begin_spread_over_their_first_conversation_and_failed_turns_stay_in_littles_law(tmp_path):
    """Turn 2 of every conversation asks for 40 tokens, 10 ms apart: past the client's 0.2 s
    timeout, it fails, ending its conversation; its 0.2 s in flight still counts."""
    plan = SessionPlan(conversations(outputs=[6, 40, 6, 6]), ThinkTime(0.1, "fixed"), "model", 512)
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=10)) as server:
        run = users_pass(server, plan, users=8, window=Window(2.0, 24), timeout_s=0.2)
    first = {}
    for log in run.turns:
        first.setdefault(log.user, log.turn)
    assert len(set(first.values())) >= 3  # not every user starts at turn 1
    failed = [log for streamed, log in zip(run.results, run.turns) if not streamed.result.success]
    assert failed and all(log.turn == 2 for log in failed)
    for turns in by_conversation(run).values():  # nothing follows a failed turn in its conversation
        assert all(streamed.result.success for streamed, _ in turns[:-1])
    figures = session_figures(run, 8)
    assert figures["users_from_littles_law"] == pytest.approx(8, rel=0.15)
    assert figures["mean_response_s"] > 0.1  # the failed turns' 0.2 s are in it


def test_a_conversation_ends_where_its_next_turn_would_not_fit_max_model_len(tmp_path):
    # 3 + 4 + 6 = 13 tokens after turn 1, 23 after turn 2; a turn needs its question, two messages'
    # slack and 6 output tokens: the third would need 23 + 4 + 16 + 6 = 49 > 45.
    max_model_len = 13 + USER_WORDS + 2 * MESSAGE_SLACK + 6 + 5
    plan = SessionPlan(conversations(), ThinkTime(0.05, "fixed"), "model", max_model_len)
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=10, itl_ms=5)) as server:
        run = users_pass(server, plan, users=2, window=Window(1.0, 10))
    held = by_conversation(run)
    assert max(len(turns) for turns in held.values()) == 2
    assert all(s.result.success for s in run.results)


def test_a_drained_users_pass_waits_for_turns_in_flight_not_for_think_times(tmp_path):
    """The serve sweep drains its passes (every turn the server timed among the results); users
    then thinking stop at the pass's end instead of sleeping out their think times (30 users
    thinking 1 s on average: the last of them would wake about 4 s later)."""
    plan = SessionPlan(conversations(), ThinkTime(1.0, "exponential"), "model", 512)
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=10)) as server:
        with SchedulingJitter() as jitter:
            run = asyncio.run(
                run_window(server.base_url, "m", iter(()), window=Window(1.0, 5), concurrency=30, arrivals=None,
                           seed=0, interval_s=0.05, timeout_s=30, users=plan, drain=True)
            )  # fmt: skip
            drain_s = time.perf_counter() - run.started - run.ended_s
    assert sum(run.counted) >= 5 and not run.cancelled
    # Turns in flight at the end take 20 ms + 6 x 10 ms on this server.
    assert drain_s < 0.5 + 2 * jitter.max_s, (drain_s, jitter)


def test_sessions_on_a_model_without_a_chat_template_stop_naming_the_settings_that_ask_for_them(monkeypatch):
    import transformers

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda folder: WordTokenizer())
    for stage, asked_by, fix in (
        (
            "serve",
            "users in chat sessions (load.users or load.session_ramp)",
            "set load.users: [] and load.session_ramp: null",
        ),
        ("capacity", "the users search (sessions.capacity)", "set sessions.capacity: false"),
    ):
        with pytest.raises(UserError) as stopped:
            session_plan({"source": "synthetic"}, "model-folder", [], 512, 0, stage)
        assert str(stopped.value) == (
            f"{asked_by}, but this model's tokenizer has no chat template; {fix} or use a chat model"
        )


def test_think_times_are_seeded_per_user_with_the_mean_asked():
    think = ThinkTime(2.0, "exponential")
    draws = [think.draw(random.Random("0-1")) for _ in range(3)]
    assert draws == [think.draw(random.Random("0-1")) for _ in range(3)]
    rng = random.Random("0-2")
    many = [think.draw(rng) for _ in range(4000)]
    assert sum(many) / len(many) == pytest.approx(2.0, rel=0.06)
    assert ThinkTime(2.0, "fixed").draw(rng) == 2.0
    assert 0 <= ThinkTime(2.0, "fixed").first(rng) <= 2.0


def write_sharegpt(path, rows):
    path.write_text(json.dumps(rows))
    return path


def message(role, text):
    return {"from": role, "value": text}


def test_sharegpt_gives_every_turn_and_counts_what_it_left_out(tmp_path):
    rows = [
        {"conversations": [message("system", "be brief"), message("human", "one two"), message("gpt", "a b c"),
                           message("human", "three"), message("gpt", "d e"), message("human", "dangling")]},
        {"conversations": [message("human", "only a question")]},  # no whole turn
        {"conversations": [message("human", "x y"), message("gpt", "z"), message("human", "again"),
                           message("human", "out of order"), message("gpt", "w")]},
        {"conversations": [message("human", "long " * 40), message("gpt", "r")]},  # does not fit
    ]  # fmt: skip
    found, counts = sharegpt_conversations(WordTokenizer(), write_sharegpt(tmp_path / "chats.json", rows), 48)
    assert [c.id for c in found] == ["sharegpt-row1", "sharegpt-row3"]
    first = found[0]
    assert first.system == "be brief" and first.base_tokens == 2
    assert [(t.user, t.max_tokens, t.reply) for t in first.turns] == [("one two", 3, "a b c"), ("three", 2, "d e")]
    assert len(found[1].turns) == 1
    assert counts == {
        "rows": 4, "without_a_turn": 2, "cut_short": 1, "turns": 3, "conversations": 2, "with_a_system_prompt": 1,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "named"),
    [
        ([{"conversations": [message("human", "a"), message("gpt", "b")]}, {"text": "no conversations"}], "row 2"),
        ([{"conversations": [message("human", "a"), {"from": "gpt"}]}], "row 1, conversations[1]"),
        ([{"conversations": [message("human", "a " * 80), message("gpt", "b")]}], "none of its 1 conversations"),
    ],
)
def test_a_sharegpt_file_that_is_not_conversations_stops_with_its_row_named(tmp_path, rows, named):
    path = write_sharegpt(tmp_path / "chats.json", rows)
    with pytest.raises(UserError, match=re.escape(named)) as raised:
        sharegpt_conversations(WordTokenizer(), path, 64)
    assert len(str(raised.value).splitlines()) == 1
    with pytest.raises(UserError, match="no file at"):
        sharegpt_conversations(WordTokenizer(), tmp_path / "missing.json", 64)


def test_synthetic_conversations_are_the_pools_turns_behind_one_system_prompt():
    pool = [{"messages": [{"role": "user", "content": f"ask {i}"}], "max_tokens": 5 + i % 3} for i in range(10)]
    settings = {"turns": 3, "system_prompt_tokens": 8}
    found = synthetic_conversations(WordTokenizer(), pool, settings, 256, seed=0)
    assert len(found) == 3 and all(len(c.turns) == 3 for c in found)  # the tenth row makes no whole conversation
    assert len({c.system for c in found}) == 1 and found[0].base_tokens == 8
    assert [t.user for c in found for t in c.turns] == [f"ask {i}" for i in range(9)]
    assert all(t.reply_tokens == t.max_tokens for c in found for t in c.turns)


def test_a_session_rate_search_ended_at_its_ceiling_by_an_undecided_probe_reads_as_undecided():
    """As CI saw it: the search's start, Little's law at the users capacity, was its ceiling, and
    the probe there, met by its share but undecided, ended the search."""
    probe = {"load": 14.0, "met": True, "decided": False}
    search = {"capacity": 14.0, "first_failing": None, "outcome": "undecided", "probes": [probe]}
    assert capacity_text("session_rate", search).startswith("undecided (14 sessions/s was not decided, the only end)")


def test_synthetic_conversations_draw_their_turn_counts_from_a_range_seeded():
    pool = [{"messages": [{"role": "user", "content": f"ask {i}"}], "max_tokens": 5} for i in range(200)]
    settings = {"turns": {"min": 2, "max": 5}, "system_prompt_tokens": 0}
    found = synthetic_conversations(WordTokenizer(), pool, settings, 256, seed=0)
    counts = [len(c.turns) for c in found]
    assert set(counts) == {2, 3, 4, 5} and 200 - 5 < sum(counts) <= 200  # the pool in order, until it runs out
    assert [t.user for c in found for t in c.turns] == [f"ask {i}" for i in range(sum(counts))]
    assert [len(c.turns) for c in synthetic_conversations(WordTokenizer(), pool, settings, 256, seed=0)] == counts
    assert [len(c.turns) for c in synthetic_conversations(WordTokenizer(), pool, settings, 256, seed=1)] != counts
    assert turns_text(settings["turns"]) == "2 to 5 turns (uniform)" and turns_text(4) == "4 turns"


@pytest.mark.slow  # a server start and a users search of a few probes
def test_the_users_search_starts_from_littles_law_and_holds_it_at_its_capacity(tmp_path):
    # TPOT about 2 + 2c ms: under the 17 ms SLO up to 7 requests running, over it from 8.
    schedule = Schedule(ttft_ms=10, itl_ms=2, itl_ms_per_running=2, max_num_seqs=64)
    settings = {
        "attainment": 0.9, "window_s": 1.0, "window_requests": 40, "repeats": 1, "start_concurrency": 4,
        "max_concurrency": 16, "max_probes": 4, "tolerance": 0.2, "rate": False, "min_rate": 0.1, "runs": 1,
        "max_search_s": 300,
    }  # fmt: skip
    load = {"burstiness": 1.0, "warmup": False, "metrics_interval_s": 0.05, "slo_ms": {"ttft": 150, "tpot": 17}}
    pool = [
        {"id": f"r{i}", "prompt": "p", "prompt_tokens": 2, "max_tokens": 8, "api": "completions"} for i in range(2000)
    ]
    plan = SessionPlan(conversations(count=200, output=8), ThinkTime(0.05, "fixed"), "model", 4096)
    record = searched(tmp_path, schedule, pool, settings, load, sessions=plan, max_users=64, session_rate=True)
    concurrency, users = record["concurrency"], record["users"]
    predicted = users["predicted_from_concurrency"]
    at = concurrency["at_capacity"]
    response_s = concurrency["capacity"] / at["request_throughput"]["mean"]  # Little: R = C / X
    assert predicted["in_flight"] == concurrency["capacity"]
    assert predicted["value"] == round(concurrency["capacity"] * (response_s + 0.05) / response_s)
    assert users["probes"][0]["load"] == predicted["value"]
    assert users["predicted_kv"] is None  # the search was given no KV facts
    assert users["capacity"] is not None and users["first_failing"] is not None
    check_probes(users["probes"], settings, settings["attainment"])
    for probe in users["probes"]:  # every probe held its users: Little's law within 20 %
        figures = probe["sessions"]
        assert figures["users"] == probe["load"]
        assert figures["users_from_littles_law"] == pytest.approx(probe["load"], rel=0.2)
        # Its counted turns by place, each place's prompt carrying the conversation before it.
        places = probe["by_turn"]
        assert sum(p["turns"] for p in places) == probe["requests"]
        assert sum(p["met_slo"] for p in places) == probe["met_slo"]
        prompts = [p["mean_prompt_tokens"] or 0 for p in places]  # None: no turn of that place succeeded
        assert [p["turn"] for p in places] == [1, 2, 3, 4] and prompts == sorted(prompts), places
    # Users think, so as many users as the concurrency capacity keep fewer in flight: met. But
    # their turns bunch, and the SLO breaks where the server runs 8 at once, so the users search
    # ends at or below Little's law's prediction with fewer than the capacity in flight on average.
    assert concurrency["capacity"] <= users["capacity"] <= predicted["value"]
    assert users["at_capacity"]["sessions"]["mean_in_flight"] <= concurrency["capacity"]
    rows = [r for r in record["requests"] if r["measurement"].startswith("users=")]
    assert rows and all(r["conversation"] for r in rows if r["failure_cause"] != "cancelled")
    # Then sessions on a schedule: from the users capacity U, U / (T x (R + Z)) new sessions a
    # second keep as many turns in flight (T = 4 turns a conversation, R and Z measured at U).
    session_rate = record["session_rate"]
    figures_at = users["at_capacity"]["sessions"]
    expected = users["capacity"] / (4 * (figures_at["mean_response_s"] + figures_at["mean_think_s"]))
    assert session_rate["probes"][0]["load"] == pytest.approx(max(expected, settings["min_rate"]))
    check_probes(session_rate["probes"], settings, settings["attainment"])
    ramp_s = session_rate["predicted_from_users"]["ramp_s"]
    for probe in session_rate["probes"]:  # open loop, each window opening after the ramp
        assert probe["sessions"]["users"] is None
        for one in probe["pass_records"]:
            assert one["window_s"][0] == pytest.approx(ramp_s, abs=0.05) and one["offered_request_rate"] > 0
    # The report states the users capacity with Little's law as the probe at it measured it.
    source = {"kind": "synthetic", "conversations": 200, "turns": 4, "system_prompt_tokens": 3}
    sessions = {"think_s": 0.05, "think": "fixed", "reply": "model", "prefix_caching": False, "conversations": source}
    shown = users_view({**record, "sessions": sessions})
    # Whatever the search decided: its start, Little's law at the users capacity, can be its ceiling
    # (the best closed-loop turn rate over T), and a probe there can end it undecided (seen in CI).
    assert (
        session_rate["capacity"] is None or session_rate["capacity"] <= session_rate["predicted_from_users"]["ceiling"]
    )
    assert shown["session_rate"] is not None and "sessions/s" in shown["session_rate"]
    at = users["at_capacity"]["sessions"]
    assert f"{users['capacity']} users" in shown["capacity"] and shown["prefix_caching"] == "off"
    assert list(users_by_turn(record)["turn"]) == [1, 2, 3, 4]
    assert shown["at"]["implied"] == f"{at['users_from_littles_law']:.1f}" and shown["predicted"] == predicted["value"]


def users_search(*figures, window_s=20.0) -> dict:
    """Probes in windows of `window_s` (20 s: 8 of a user's cycles of 0.5 s + 2 s)."""
    return {
        "probes": [
            {"load": users, "sessions": sessions, "window": {"seconds": window_s}} for users, sessions in figures
        ]
    }


def figures(users, implied) -> tuple[int, dict]:
    return users, {"users": users, "users_from_littles_law": implied, "mean_response_s": 0.5, "mean_think_s": 2.0}


def test_a_probe_that_did_not_hold_its_users_is_flagged():
    assert users_held(users_search(figures(10, 9.0), figures(20, 23.0)))["status"] == "pass"
    off = users_held(users_search(figures(10, 9.0), figures(20, 15.0)))  # L x (R + Z) / R: 5 users short
    assert off["status"] == "warn" and off["value"] == 1 and "20 users: Little's law gives 15.0" in off["detail"]
    assert users_held(users_search(figures(1, None)))["status"] == "not_available"  # no think time taken
    # Windows of 4 cycles read low (docs/method.md#sessions): not judged.
    short = users_held(users_search(figures(10, 9.0), figures(20, 15.0), window_s=10.0))
    assert short["detail"] == (
        "not available: not judged: 2 of 2 probes, whose windows span fewer than 5 of a user's cycles (R + Z) and "
        "read low; raise capacity.window_s to judge them (docs/method.md#sessions)"
    )
    held = users_held(users_search(figures(10, 9.0)))
    assert held["detail"] == (
        "in every probe judged, requests in flight x (response + think) / response lies within 20% of the users "
        "(docs/method.md#sessions)"
    )


def test_a_users_level_pass_that_did_not_hold_its_users_or_took_their_turns_late_warns():
    held = {"users": 20, "users_from_littles_law": 19.0, "mean_response_s": 0.5, "mean_think_s": 2.05,
            "mean_think_drawn_s": 2.0}  # fmt: skip

    def statuses(figures, window_s=20.0):  # 20 s: 8 of a user's cycles (0.5 s + 2.05 s)
        return {c["name"]: c["status"] for c in session_checks(figures, window_s)}

    assert statuses(held) == {"users_held": "pass", "users_on_time": "pass"}
    assert statuses({**held, "users_from_littles_law": 15.0})["users_held"] == "warn"  # 5 users short
    assert statuses({**held, "mean_think_s": 2.3})["users_on_time"] == "warn"  # 15 % late
    # A window of under 5 cycles reads Little's law low: not judged (docs/method.md#sessions).
    assert statuses({**held, "users_from_littles_law": 15.0}, window_s=10.0)["users_held"] == "not_available"
    none_taken = {**held, "users_from_littles_law": None, "mean_think_s": None}
    assert statuses(none_taken) == {"users_held": "not_available", "users_on_time": "not_available"}
    # No think time drawn: Little's law is L itself, judged; late thinking is undefined.
    none_drawn = {**held, "users_from_littles_law": 19.5, "mean_think_s": 0.01, "mean_think_drawn_s": 0.0}
    assert statuses(none_drawn) == {"users_held": "pass", "users_on_time": "not_available"}
    assert "sessions.think_s: 0" in session_checks(none_drawn, 20.0)[1]["detail"]


def test_a_client_late_to_its_users_turns_limits_its_probe(tmp_path, monkeypatch):
    """Planted: every think pause the client takes lasts 1.5 times the think time drawn."""
    from infbench.serving.window import _Pass

    plan = SessionPlan(conversations(), ThinkTime(0.2, "fixed"), "model", 512)
    slo_ms = {"ttft": 1000}
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=10)) as server:
        on_time = PassRecord.of(MeasuredPass.of(users_pass(server, plan, window=Window(1.5, 16)), False), slo_ms, 4)
        real_pause = _Pass.pause
        monkeypatch.setattr(_Pass, "pause", lambda state, seconds: real_pause(state, 1.5 * seconds))
        late = PassRecord.of(MeasuredPass.of(users_pass(server, plan, window=Window(1.5, 16)), False), slo_ms, 4)
    assert not on_time.client_behind
    assert late.sessions["mean_think_s"] == pytest.approx(0.3, abs=0.03) and late.client_behind
    record = probe_record([late], 1, 0.9, False)
    assert record["client_limited_by"] == ["behind"] and record["decision"] == "undecided"
    assert "its users took their turns late" in client_evidence(record)


def test_the_kv_prediction_for_sessions_counts_each_turn_with_its_conversation_so_far():
    conversation = conversations(count=1, turns=3, output=6)[0]  # a 3-word system prompt, 4-word turns
    slack = 2 * MESSAGE_SLACK
    model = turn_footprints(conversation, "model", 512)
    assert model == [(3 + 4 + slack, 6), (29 + 4 + slack, 6), (55 + 4 + slack, 6)]  # each reply its 6 tokens
    recorded = turn_footprints(conversation, "recorded", 512)
    assert recorded == [(23, 6), (23 + 3 + 4 + slack, 6), (46 + 3 + 4 + slack, 6)]  # each reply its 3 words
    assert len(turn_footprints(conversation, "model", 60)) == 2  # the third turn would need 81 + 6 tokens
    # Blocks of 16: 2, 4 and 6 a conversation; 25 blocks (one is vLLM's null block) hold 6 turns.
    plan = SessionPlan(conversations(count=3, turns=3, output=6), ThinkTime(1.5), "model", 512)
    search = {"at_capacity": {"sessions": {"mean_response_s": 0.5, "mean_think_s": 1.5}}, "probes": []}
    predicted = users_kv_limit(plan, {"block_size": 16, "num_blocks": 25}, 512, search)
    assert predicted["in_flight"] == 6 and predicted["mean_blocks_per_turn"] == 4
    assert predicted["users"] == pytest.approx(6 * (0.5 + 1.5) / 0.5)


def test_sessions_on_a_schedule_start_at_their_arrivals_and_open_the_window_after_the_ramp(tmp_path):
    """Sessions of one or four turns (6 tokens, 0.1 s think), a session every 0.1 s on average
    (Poisson), the ramp 0.8 s."""
    mixed = conversations(count=30) + conversations(count=30, outputs=[6])
    plan = SessionPlan(mixed, ThinkTime(0.1, "fixed"), "model", 512, ramp_s=0.8)
    arrivals = Arrivals(10.0)
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=10)) as server:
        run = asyncio.run(
            run_window(server.base_url, "m", iter(()), window=Window(1.0, 16), concurrency=None, arrivals=arrivals,
                       seed=0, interval_s=0.05, timeout_s=30, users=plan)
        )  # fmt: skip
    offsets = open_loop_offsets(arrivals, Window(1.0, 16), 0, 30)
    held = by_conversation(run)
    assert {len(turns) for turns in held.values()} >= {1, 4}
    for turns in held.values():
        (first, log), *_ = turns
        assert log.turn == 1 and [log.turn for _, log in turns] == list(range(1, len(turns) + 1))
        # Its first turn goes out at its arrival (a session is a `user` of its own, numbered in order).
        assert first.sent_at - run.started == pytest.approx(offsets[log.user], abs=0.05)
    # The ramp is a time: the first one-turn session ended long before it.
    assert run.opened_s == pytest.approx(0.8, abs=0.02)
    assert sum(run.counted) >= 16
    # The counted sessions' first turns keep their send lags; the client kept its schedule.
    counted_first = [log.turn == 1 for log, counted in zip(run.turns, run.counted) if counted]
    assert len(run.counted_send_lags_s) == sum(counted_first) > 0
    assert not PassRecord.of(MeasuredPass.of(run, True), {"ttft": 1000}).client_behind
    figures = session_figures(run, None)
    assert figures["users"] is None and 1.2 <= figures["mean_turn"] <= 3.5
    rows = probe_rows(run, mode="session_rate", load=10.0, api="chat", burstiness=1.0, trace_scale=None,
                      pass_number=1, slo_ms={"ttft": 1000})  # fmt: skip
    assert {(r["measurement"], r["request_rate"], r["max_concurrency"]) for r in rows} == {
        ("sessions=10/s", None, None)
    }
    assert all(r["user"] is not None for r in rows)
    # The exported rows of a session's first turn carry its session's start; later turns none.
    assert all((r["scheduled_s"] is not None) == (r["turn"] == 1) for r in rows)
    assert all(min(abs(r["scheduled_s"] - o) for o in offsets) < 1e-5 for r in rows if r["turn"] == 1)


def test_the_session_rate_search_starts_from_the_users_capacity():
    plan = SessionPlan(conversations(count=2, turns=4) + conversations(count=2, turns=2), ThinkTime(1.0), "model",
                       512)  # fmt: skip
    figures = {"mean_response_s": 0.5, "mean_think_s": 1.5}
    users = {"capacity": 30, "at_capacity": {"sessions": figures},
             "probes": [{"request_throughput": {"mean": 12.0}}]}  # fmt: skip
    concurrency = {"probes": [{"request_throughput": {"mean": 24.0}}]}
    found = sessions_from_users(users, concurrency, plan, floor=0.1)
    # T = 3 turns on average: 30 / (3 x 2.0) = 5 sessions/s; the ceiling 24 / 3; the ramp the
    # 90th percentile of 4 x 0.5 + 3 x 1.5 and 2 x 0.5 + 1.5.
    assert found == {"start": 5.0, "ceiling": 8.0, "ramp_s": 6.5, "turns_per_session": 3.0}
    none_met = sessions_from_users({**users, "capacity": None, "at_capacity": None}, concurrency, plan, floor=0.1)
    assert none_met["start"] == 0.1 and none_met["ceiling"] == 8.0
    above = sessions_from_users(users, {"probes": [{"request_throughput": {"mean": 3.0}}]}, plan, floor=0.1)
    assert above["ceiling"] == 5.0  # never below the start


@pytest.mark.slow  # two reference-server passes of 2 s and their warm-ups
def test_a_users_level_of_the_sweep_counts_turns_in_its_window_and_holds_littles_law(tmp_path):
    """load.users: N users in sessions as a serving level beside the request levels, its turns
    counted in a steady-state window, each repeat read through Little's law, every turn in the
    request table with its user, conversation and place."""
    from test_level_windows import LOAD, rows

    from infbench.core.level_names import level_name
    from infbench.report.serve import level_label, users_levels_view
    from infbench.serving.request_table import level_rows
    from infbench.serving.sweep import run_sweep

    plan = SessionPlan(conversations(), ThinkTime(0.1, "fixed"), "model", 512)
    # 1.2 s windows: over 5 of a user's turn-and-think cycles (0.1 s + 0.08 s), so users_held is made.
    load = {**LOAD, "request_rates": [], "users": [4], "window_s": 1.2, "warmup": True}
    with ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=10, max_num_seqs=8)) as server:
        closed, users = run_sweep(
            server=server, workload=rows(4), pool=rows(1000), load=load, seed=0, timeout_s=30, tokenizer=None,
            prefix_caching=False, sessions=plan, progress=lambda line: None,
        )  # fmt: skip
    assert closed["mode"] == "concurrency" and "sessions" not in closed
    assert (users["mode"], users["api"], users["max_concurrency"]) == ("users", "chat", 4)
    assert (level_name(users), level_label(users)) == ("users=4", "4 users")
    for repeat in users["repeats"]:
        assert len(repeat["requests"]) >= LOAD["window_requests"]
        assert all(
            r["request_id"].startswith("c") and r["turn"] >= 1 and r["user"] in range(4) for r in repeat["requests"]
        )
        checks = {c["name"]: c["status"] for c in repeat["checks"]}
        assert checks["steady_window"] == checks["short_outputs"] == checks["failed_requests"] == "pass"
        assert checks["users_held"] == checks["users_on_time"] == "pass"
        assert repeat["sessions"]["users"] == 4
        assert repeat["sessions"]["users_from_littles_law"] == pytest.approx(4, rel=0.15)
        assert repeat["sessions"]["turns"] == len(repeat["requests"])
    assert {"users_held", "users_on_time"} <= {c["name"] for c in users["checks"]}
    assert not {"users_held", "users_on_time"} & {c["name"] for c in closed["checks"]}
    turns = [r["sessions"]["turns"] for r in users["repeats"]]
    assert users["sessions"]["turns"] == pytest.approx(sum(turns) / len(turns))
    table = level_rows([users], LOAD["slo_ms"])
    assert {(r["measurement"], r["max_concurrency"]) for r in table} == {("users=4", None)}  # as a users probe's
    assert sum(r["counted"] for r in table) == sum(len(r["requests"]) for r in users["repeats"])
    assert len(table) > sum(r["counted"] for r in table)  # the ramp's and the drain's turns too, each named
    assert all(r["conversation"] and r["turn"] >= 1 and r["think_s"] is not None for r in table)
    # Section 5 reads the users level through Little's law, the request levels left out.
    shown = users_levels_view({"levels": [closed, users], "sessions": SESSIONS_SETTINGS, "settings": load})
    assert shown["source"] == "60 synthetic conversations of 4 turns behind one system prompt of 3 tokens"
    (row,) = shown["table"].to_dict("records")
    assert row["level"] == "4 users"
    assert row["users L × (R + Z) / R"] == f"{users['sessions']['users_from_littles_law']:.1f}"
    implied = sorted(r["sessions"]["users_from_littles_law"] for r in users["repeats"])
    assert row["over the passes"] == f"{implied[0]:.1f} to {implied[-1]:.1f}"
    assert users_levels_view({"levels": [closed], "sessions": None, "settings": load}) is None


def test_sessions_on_a_ramp_start_on_its_schedule_and_every_turn_of_every_conversation_counts(tmp_path):
    """load.session_ramp: sessions starting at a rate rising from 4 to 16 a second, each one
    conversation of 3 turns from its first, 0.1 s of thought between turns; the pass ends when
    the last conversation has, every turn counted (no window), each session's start on time."""
    from test_level_windows import LOAD, rows

    from infbench.core.level_names import level_name
    from infbench.report.serve import level_label, users_levels_view, whole_pass_text
    from infbench.serving.arrivals import send_offsets
    from infbench.serving.request_table import level_rows
    from infbench.serving.sweep import run_sweep

    plan = SessionPlan(conversations(turns=3), ThinkTime(0.1, "fixed"), "model", 512)
    ramp = {"start_rate": 4.0, "end_rate": 16.0, "sessions": 12}
    load = {**LOAD, "concurrency": [], "request_rates": [], "session_ramp": ramp}
    with (
        ReferenceServer("m", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=10, max_num_seqs=16)) as server,
        SchedulingJitter() as jitter,
    ):
        (level,) = run_sweep(
            server=server, workload=rows(4), pool=rows(100), load=load, seed=0, timeout_s=30, tokenizer=None,
            prefix_caching=False, sessions=plan, progress=lambda line: None,
        )  # fmt: skip
    assert (level["mode"], level["api"], level["max_concurrency"]) == ("session_ramp", "chat", None)
    assert (level["request_rate"], level["ramp_end_rate"]) == (4.0, 16.0) and "sessions" not in level
    assert "max_send_lag_ms" not in level  # no client queue figures over first turns alone
    assert (level_name(level), level_label(level)) == ("sessions 4-16/s", "sessions 4→16/s")
    for number, repeat in enumerate(level["repeats"]):
        assert repeat["window"] is None and repeat["uncounted_requests"] == []  # a whole pass
        turns = repeat["requests"]
        by_session = defaultdict(list)
        for turn in sorted(turns, key=lambda r: r["sent_s"]):
            by_session[turn["user"]].append(turn)
        assert sorted(by_session) == list(range(12))  # every session started, each a user of its own
        assert all([t["turn"] for t in held] == [1, 2, 3] for held in by_session.values())  # whole conversations
        assert all(t["success"] for t in turns) and len(turns) == 36
        # Each session's first turn left at its place in the ramp's schedule (seeded seed + repeat),
        # never before it, and late only by what this machine's scheduling allowed meanwhile (two
        # wakes: the dispatcher's and the session's) and one send's own cost, from its time or
        # the client's last other send (any turn's) while it waited.
        offsets = send_offsets(12, Arrivals(4.0, 1.0, 16.0), number)
        sends = [turn["sent_s"] for turn in turns]
        starts = [by_session[user][0]["sent_s"] for user in range(12)]
        assert all(sent >= due for sent, due in zip(starts, offsets)), (starts, offsets)
        gaps = [sent - waited_from(due, sent, sends) for sent, due in zip(starts, offsets)]
        assert max(gaps) < jitter.allowance(SEND_COST_S, wakes=2), (starts, gaps, jitter)
        # A session's first turn carries its place in the schedule (the exported table's too), later turns none.
        assert [by_session[user][0]["scheduled_s"] for user in range(12)] == offsets
        assert all("scheduled_s" not in turn for held in by_session.values() for turn in held[1:])
        checks = {c["name"]: c for c in repeat["checks"]}
        assert checks["send_lag"]["value"] >= 0 and "sessions started up to" in checks["send_lag"]["detail"]
        assert checks["failed_requests"]["status"] == checks["short_outputs"]["status"] == "pass"
        assert "steady_window" not in checks
    table = level_rows([level], LOAD["slo_ms"])
    # A session ramp's rates are sessions a second: no request rate in the table.
    assert {(r["measurement"], r["max_concurrency"], r["request_rate"]) for r in table} == {
        ("sessions 4-16/s", None, None)
    }
    assert len(table) == 72 and all(r["counted"] for r in table)
    assert sorted(r["turn"] for r in table if r["scheduled_s"] is not None) == [1] * 24
    view = users_levels_view({"levels": [level], "sessions": SESSIONS_SETTINGS, "settings": load})
    assert view["session_ramp"] == "sessions 4→16/s" and view["ramp_sessions"] == 12 and view["table"].empty
    assert whole_pass_text([level]) == "session ramp levels"
