"""SLO capacity: a search on the reference server, whose schedule puts the capacity at a known
load, finds exactly that bracket with every probe holding what a probe must; the tiny run's
search keeps what is vLLM's own (its /metrics in every probe, the limit read from its scrapes,
its KV pool and its default max_num_seqs), not a finite capacity under an SLO that a machine's
speed decides; and the capacity stage's config errors."""

from __future__ import annotations

import pytest
from conftest import tiny_config

# ------------------------------------------------------------------------ the tiny run


def test_the_tiny_runs_search_records_every_probe_with_vllms_scrapes_and_limits(tiny_run):
    from conftest import check_probes

    from infbench.core.artifacts import read_json, read_jsonl, validate
    from infbench.kv.simulator import Strategy, TraceRequest, static_capacity
    from infbench.serving.client import load_request
    from infbench.serving.window import RequestSupply

    capacity = read_json(tiny_run / "results/tiny/capacity.json")
    validate(capacity, "capacity")
    search = capacity["concurrency"]
    probes = {p["load"]: p for p in search["probes"]}
    assert probes and len(probes) == len(search["probes"])  # no load probed twice
    # The windows, passes and intervals hold at any outcome, finite or not, on vLLM's latencies.
    check_probes(search["probes"], capacity["settings"], capacity["attainment_target"])
    # Every probe's requests in the table beside it, read back: as many counted as the probes
    # counted, over every window.
    import pandas

    table = pandas.read_csv(tiny_run / "results/tiny" / capacity["requests_table"]["file"])
    assert len(table) == capacity["requests_table"]["rows"] and table["counted"].dtype == bool
    counted = table[table["counted"]].groupby("measurement").size().to_dict()
    users = capacity["users"]["probes"]
    assert counted == {
        **{f"c={int(p['load'])}": p["requests"] for p in search["probes"]},
        **{f"users={int(p['load'])}": p["requests"] for p in users},
    }
    # Users in chat sessions on vLLM's server: each turn's prompt, through the model's chat
    # template, carries the earlier turns and the model's replies (vLLM's usage counts them).
    check_probes(users, capacity["settings"], capacity["attainment_target"])
    turns = table[table["measurement"].str.startswith("users=") & table["success"]]
    carried = 0
    drawn = turns["request_id"].str.replace(r"/turn-\d+", "", regex=True)  # the conversation and its draw
    for _, conversation in turns.groupby([turns["measurement"], turns["pass"], drawn]):
        ordered = conversation.sort_values("turn")
        for earlier, later in zip(ordered.itertuples(), ordered.iloc[1:].itertuples()):
            assert later.turn == earlier.turn + 1
            assert later.prompt_tokens > earlier.prompt_tokens + earlier.output_tokens
            carried += 1
    assert carried > 0
    assert all(p["sessions"]["users"] == p["load"] and p["sessions"]["mean_in_flight"] > 0 for p in users)
    # Each turn's place as its request id names it (from the conversation, not from the logs).
    assert (turns["request_id"].str.extract(r"/turn-(\d+)#")[0].astype(int) == turns["turn"]).all()
    for probe in users:  # its counted turns by place, as the table counts them
        rows = table[(table["measurement"] == f"users={int(probe['load'])}") & table["counted"]]
        assert {one["turn"]: one["turns"] for one in probe["by_turn"]} == rows.groupby("turn").size().to_dict()
    # The KV simulator's prediction for sessions, on vLLM's own pool.
    predicted_kv = capacity["users"]["predicted_kv"]
    assert predicted_kv["in_flight"] >= 1 and predicted_kv["mean_blocks_per_turn"] >= 1
    # Every probe with vLLM's /metrics: its windows' peaks and the scrapes they were read from.
    for probe in search["probes"]:
        # A client starved in a pass it kept (client-limited) may have scraped nothing running, and
        # so no KV blocks in use (CI on B: c=4 stalled three times, its third pass's 12 scrapes all
        # idle), and a stalled pass no scrape at all in its window (CI on B: c=16's loop woke 1.4 to
        # 1.6 s late in all three passes, the third's 2 s window without a scrape).
        starved = probe["client_limited_by"] == ["stalled"]
        assert probe["peak_num_requests_running"] >= 1 or starved, probe["load"]
        assert probe["peak_num_requests_waiting"] >= 0 and 0 <= probe["peak_kv_cache_usage_perc"] <= 1
        assert probe["peak_kv_cache_usage_perc"] > 0 or starved, probe["load"]
        assert all(one["metrics_series"] or one["client_stalled"] for one in probe["pass_records"]), probe["load"]
    # The binding limit read where the SLO broke (else at the highest load) from vLLM's busy scrapes.
    binding = search["binding"]
    assert binding["at"] == (search["first_failing"] if search["first_failing"] is not None else max(probes))
    if search["outcome"] == "client_limited":  # the failing probe's client starved: not the server's limit
        assert binding["limit"] == "client"
    else:
        assert binding["limit"] in ("compute", "scheduler", "kv_memory", "max_num_seqs")
        assert sum(binding["scrapes"].values()) > 0
    # The search's seed: the pool's requests, in the order probes draw them, at their peak
    # footprint on the engine's pool.
    kv = capacity["kv"]
    pool = read_jsonl(tiny_run / "results/tiny/request_pool.jsonl")
    rows = RequestSupply(pool, load_request, 0).rows
    trace = [TraceRequest(r["prompt_tokens"], r["max_tokens"]) for r in rows]
    strategy = Strategy("paged", "paged", block_size=kv["block_size"])
    expected = static_capacity(trace, strategy, (kv["num_blocks"] - 1) * kv["block_size"], 256)
    assert capacity["predicted_kv_concurrency"]["value"] == expected
    # The cap the binding limit is judged by is vLLM's own for its OpenAI server on a CPU (0.32: 128).
    assert capacity["max_num_seqs"] == {
        "value": 128,
        "source": "vLLM's default for its OpenAI server on this device (EngineArgs.get_batch_defaults)",
    }
    page = (tiny_run / "results/report.html").read_text()
    assert "The server ran at most 128 requests at once (max_num_seqs, from vLLM&#39;s default" in page
    # The rate search is off in the test config (tested on reference servers).
    assert "request_rate" not in capacity
    # The cost at the capacity, where a load met the SLO on this machine.
    served = search["at_capacity"]["output_throughput"]["mean"] if search["at_capacity"] else None
    assert capacity["cost"]["per_million_output_tokens"] == (
        pytest.approx(2.0 / (served * 3600) * 1e6) if served else None
    )


# ------------------------------------------------------------------------ the reference server


# The reference server's decode step takes 10 ms a running request: TPOT 10c ms.
STEP_PER_RUNNING = {"ttft_ms": 10, "itl_ms": 0, "itl_ms_per_running": 10, "max_num_seqs": 64}


def known_search(
    tmp_path, tpot_slo_ms: float, requests: int, max_tokens: int, client_processes: int = 1, **settings
) -> tuple[dict, dict]:
    """A capacity search on STEP_PER_RUNNING under a TPOT SLO of `tpot_slo_ms`, its probes one
    window of 10 requests over 0.3 s unless `settings` say otherwise, from `client_processes`:
    its settings and record."""
    from conftest import searched

    from infbench.serving.reference_server import Schedule

    settings = {
        "attainment": 0.7, "window_s": 0.3, "window_requests": 10, "repeats": 1, "start_concurrency": 2,
        "max_concurrency": 16, "max_probes": 8, "tolerance": 0.0, "rate": False, "min_rate": 0.1, "runs": 1,
        "max_search_s": 300, **settings,
    }  # fmt: skip
    slo = {"ttft": 1000, "tpot": tpot_slo_ms}
    load_settings = {"burstiness": 1.0, "warmup": False, "metrics_interval_s": 0.05, "slo_ms": slo,
                     "client_processes": client_processes}  # fmt: skip
    pool = [{"id": f"r{i}", "prompt": f"prompt {i}", "prompt_tokens": 2, "max_tokens": max_tokens, "api": "completions"}
            for i in range(requests)]  # fmt: skip
    return settings, searched(tmp_path, Schedule(**STEP_PER_RUNNING), pool, settings, load_settings)


@pytest.mark.slow  # a server start and five probes of about half a second
@pytest.mark.parametrize("client_processes", [1, 2])
def test_a_schedule_with_a_known_capacity_is_bracketed_exactly_with_every_probe_recorded(tmp_path, client_processes):
    """Each decode step takes 10 ms per running request: TPOT 10c ms, under the 45 ms SLO up to
    c = 4 (40 ms) and over it from c = 5 (50 ms), 5 ms either side, more than a busy machine
    adds to a step on average. Bracketing from 2 (2, 4, 8) then bisecting (6, 5) finds
    exactly [4, 5]: a finite capacity, the probe at 4 met and the one at 5 missed; the same
    with the probes' requests streamed by two client processes (load.client_processes)."""
    from conftest import check_probes

    settings, record = known_search(tmp_path, 45, requests=300, max_tokens=4, client_processes=client_processes)
    search = record["concurrency"]
    passes = [one for p in search["probes"] for one in p["stalled_passes"] + p["pass_records"]]
    assert {one["client_processes"] for one in passes} == {client_processes}
    probes = {p["load"]: p for p in search["probes"]}
    shares = {load: p["attainment"] for load, p in probes.items()}
    assert (search["capacity"], search["first_failing"]) == (4, 5), shares
    assert sorted(probes) == [2, 4, 5, 6, 8] and len(search["probes"]) == 5  # no load probed twice
    assert probes[4]["met"] and not probes[5]["met"]
    check_probes(search["probes"], settings, settings["attainment"])
    # c=1's TPOT (10 ms) takes under half the 45 ms SLO: the search starts where configured.
    assert (search["start"]["load"], search["start"]["pilot"]["slo_share"]["tpot"]) == (
        2,
        pytest.approx(10 / 45, abs=0.1),
    )
    # The capacity read from every probe, with its interval around it.
    estimate = search["estimate"]
    low, high = estimate["ci95"]
    assert isinstance(estimate["value"], (int, float))
    assert (low == "below" or low <= estimate["value"]) and (high == "above" or estimate["value"] <= high)
    # The reference server publishes vLLM's metric names: the peaks and the limit read from them.
    assert all(1 <= p["peak_num_requests_running"] <= p["load"] for p in search["probes"])
    assert search["binding"]["at"] == 5 and search["binding"]["limit"] == "compute"
    # Every probe's requests as table rows: its counted ones as many as it counted, each timed
    # on the schedule (TTFT 10 ms, TPOT 10c ms), the uncounted ones beside them.
    rows = record["requests"]
    for load, probe in probes.items():
        every = [r for r in rows if r["measurement"] == f"c={load}"]
        passes = probe["stalled_passes"] + probe["pass_records"]  # a pass measured again is in the table too
        assert len(every) == sum(one["sent"] for one in passes)  # cut off at the pass's end too
        assert not any(r["counted"] or r["success"] for r in every if r["failure_cause"] == "cancelled")
        mine = [r for r in every if r["failure_cause"] != "cancelled"]
        assert sum(r["counted"] for r in mine) == probe["requests"] and len(mine) > probe["requests"]
        assert {r["pass"] for r in mine if r["counted"]} == {probe["pass_records"][0]["pass"]}
        assert all(r["run"] == 1 and r["scheduled_s"] is None and r["success"] for r in mine)
        assert all(0.009 < r["first_token_s"] - r["sent_s"] < 0.5 for r in mine)
        tpot_ms = [(r["last_token_s"] - r["first_token_s"]) / 3 * 1000 for r in mine if r["counted"]]
        assert sorted(tpot_ms)[len(tpot_ms) // 2] == pytest.approx(10 * load, rel=0.5)
    assert len(rows) == len({r["request_id"] + r["measurement"] for r in rows})


@pytest.mark.slow  # a reference server's search, its windows real time
def test_where_c1_already_sits_near_the_slo_the_search_starts_at_1(tmp_path):
    """TPOT 10c ms against a 15 ms SLO: the pilot's c=1 TPOT takes two thirds of it, so the
    search starts at 1 rather than at capacity.start_concurrency (8) and finds [1, 2] in two
    probes, not four halvings down from 8 (docs/method.md#capacity-search)."""
    from infbench.capacity.measure import NEAR_SLO, PILOT_REQUESTS

    search = known_search(tmp_path, 15, requests=300, max_tokens=4, start_concurrency=8)[1]["concurrency"]
    start = search["start"]
    assert (start["load"], start["configured"], start["first_probe"]) == (1, 8, 1), start
    assert start["pilot"]["requests"] == start["pilot"]["succeeded"] == PILOT_REQUESTS
    assert start["pilot"]["slo_share"]["tpot"] == pytest.approx(10 / 15, abs=0.1) and NEAR_SLO < 10 / 15
    assert [p["load"] for p in search["probes"]] == [1, 2]
    assert (search["capacity"], search["first_failing"]) == (1, 2)


@pytest.mark.slow  # a server start and five probes, two of them two windows
def test_a_search_decided_by_early_stopping_brackets_the_known_capacity_exactly(tmp_path):
    """The schedule above, decided by LoadGen's early stopping at 0.99 and a target of 0.8: 21
    requests all within the SLO are needed (Wilson: 16), so a met probe of 16-request windows
    takes two windows where Wilson takes one; every probe holds what a probe must, under that rule."""
    from conftest import check_probes

    rule = {"attainment": 0.8, "decision": "early_stopping", "confidence": 0.99, "window_requests": 16, "repeats": 2}
    settings, record = known_search(tmp_path, 45, requests=600, max_tokens=8, **rule)
    assert record["decision_rule"] == {"name": "early_stopping", "confidence": 0.99}
    search = record["concurrency"]
    probes = {p["load"]: p for p in search["probes"]}
    assert (search["capacity"], search["first_failing"], search["outcome"]) == (4, 5, "bracketed")
    assert sorted(probes) == [2, 4, 5, 6, 8]
    check_probes(search["probes"], settings, settings["attainment"])
    for load in (2, 4):  # 16 of 16 is undecided under early stopping; 32 of 32 is met
        assert probes[load]["decision"] == "met" and probes[load]["passes"] == 2
        assert probes[load]["met_slo"] == probes[load]["requests"] >= 21
    assert all(probes[load]["decision"] == "missed" for load in (5, 6, 8))


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("paging_live", {"max_model_len": 500}, "multiple of 32"),
        ("paging_live", {"max_model_len": 256, "output_tokens": 8}, "at least 264"),
        ("paging_live", {"pool_tokens": 1000}, "at least 1024"),
        ("capacity", {"start_concurrency": 128, "max_concurrency": 64}, "start <= max"),
        ("sessions", {"source": "no/such/chats.json"}, "sessions.source = 'no/such/chats.json': no file there"),
        ("sessions", {"think": "gamma"}, "sessions.think"),
        ("sessions", {"capacity": False, "rate": True}, "sessions.rate searches the rate sessions start at"),
        ("sessions", {"turns": {"min": 5, "max": 2}}, "sessions.turns = .*min is above max"),
        ("sessions", {"turns": {"min": 2}}, "sessions.turns"),
    ],
)
def test_capacity_and_paging_config_errors(tmp_path, section, values, message):
    from infbench.core.config import ConfigError, validate_config

    config = tiny_config(tmp_path)
    config["models"][0]["path"] = str(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    config[section].update(values)
    from conftest import REPO

    with pytest.raises(ConfigError, match=message):
        validate_config(config, REPO / "workflow/schemas/config.schema.yaml", REPO)
