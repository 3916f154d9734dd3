"""Trace replay: Mooncake, BurstGPT and timestamp_s traces read with their arrival times, bad
rows refused with one line naming the file, the row and the field, and a level replaying a
trace sends each request at its arrival time over the scale, on the reference server (whose
timing is known), through the pipeline too (the reference server as the endpoint)."""

from __future__ import annotations

import asyncio
import csv
import gc
import json
from pathlib import Path

import pytest
from conftest import copy_checkout, snakemake, tiny_config, write_config
from timing import SchedulingJitter, waited_from

from infbench.core.artifacts import read_json, validate
from infbench.serving.arrivals import TraceArrivals
from infbench.serving.client import LoadRequest, run_level
from infbench.serving.reference_server import ReferenceServer, Schedule
from infbench.serving.sweep import configured_levels
from infbench.workload.sources import WorkloadError
from infbench.workload.traces import read_trace

# A Mooncake trace: milliseconds; rows 1 and 3 share their first block, row 2 shares none.
MOONCAKE = [
    {"timestamp": 1000, "input_length": 40, "output_length": 4, "hash_ids": [7, 8]},
    {"timestamp": 1250, "input_length": 30, "output_length": 3, "hash_ids": [9]},
    {"timestamp": 1250, "input_length": 20, "output_length": 5, "hash_ids": [7]},
    {"timestamp": 2000, "input_length": 5000, "output_length": 5, "hash_ids": [1, 2]},  # too long for the tiny model
    {"timestamp": 3000, "input_length": 10, "output_length": 2, "hash_ids": [3]},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_burstgpt(path: Path, rows: list[tuple]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])
        writer.writerows(rows)
    return path


def test_three_formats_read_with_arrivals_from_the_first_row(tmp_path):
    fmt, count, rows = read_trace(write_jsonl(tmp_path / "m.jsonl", MOONCAKE), "auto")
    assert (fmt, count) == ("mooncake", 5)
    assert [r.arrival_s for r in rows] == [0.0, 0.25, 0.25, 1.0, 2.0]
    assert rows[0].blocks == (7, 8) and rows[0].input_tokens == 40 and rows[0].output_tokens == 4

    burst = [(5.0, "ChatGPT", 100, 20, 120, "Conversation log"), (5.5, "GPT-4", 50, 0, 50, "API log"),
             (7.0, "ChatGPT", 60, 30, 90, "Conversation log")]  # fmt: skip
    fmt, count, rows = read_trace(write_burstgpt(tmp_path / "b.csv", burst), "auto")
    assert (fmt, count) == ("burstgpt", 3)
    assert [(r.row, r.arrival_s, r.input_tokens, r.output_tokens) for r in rows] == [
        (1, 0.0, 100, 20),
        (3, 2.0, 60, 30),
    ]

    plain = [{"timestamp_s": 10, "prompt": "hello there", "output_length": 3}, {"timestamp_s": 10.5, "input_length": 7,
             "output_length": 2}]  # fmt: skip
    fmt, _, rows = read_trace(write_jsonl(tmp_path / "t.jsonl", plain), "auto")
    assert fmt == "jsonl" and rows[0].prompt == "hello there" and (rows[1].arrival_s, rows[1].input_tokens) == (0.5, 7)


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"timestamp": 0, "input_length": 4, "output_length": -1}], r"row 1, field 'output_length' = -1 is not"),
        ([{"timestamp": 0, "input_length": 4, "output_length": 2}, {"timestamp": 5, "output_length": 2}],
         r"row 2, field 'input_length' = None"),
        ([{"timestamp": 9, "input_length": 4, "output_length": 2}, {"timestamp": 5, "input_length": 4,
          "output_length": 2}], r"row 2, its timestamp is earlier than row 1's; sort the trace by time"),
        ([{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": ["a"]}], r"row 1, field 'hash_ids'"),
        ([{"timestamp_s": 0, "output_length": 2}], r"row 1 has neither 'prompt' nor 'input_length'"),
    ],
)  # fmt: skip
def test_a_bad_row_is_named_with_its_file_row_and_field(tmp_path, rows, message):
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(WorkloadError, match=message) as raised:
        read_trace(path, "auto")
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_a_csv_without_burstgpts_columns_and_a_line_that_is_not_json(tmp_path):
    other = tmp_path / "other.csv"
    other.write_text("time,tokens\n1,2\n")
    with pytest.raises(WorkloadError, match=r"other.csv: row 1 has no field 'Timestamp' \(its fields: time, tokens\)"):
        read_trace(other, "auto")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n{oops\n')
    with pytest.raises(WorkloadError, match=r"broken.jsonl: row 2 is not JSON"):
        read_trace(broken, "auto")


def test_trace_levels_one_a_scale_with_the_traces_rate():
    load = {"concurrency": [], "request_rates": [], "ramp": None, "max_concurrency": 8, "burstiness": 1.0,
            "trace_scales": [1.0, 4.0], "users": [],
            "session_ramp": None}  # fmt: skip
    levels = configured_levels(load, "completions", False, (0.0, 0.5, 2.0))
    assert [(level.mode, level.arrivals.scale, level.arrivals.rate) for level in levels] == [
        ("trace", 1.0, 1.0),
        ("trace", 4.0, 4.0),
    ]
    assert configured_levels(load, "completions", False, (0.0,)) == []  # one arrival: nothing to replay


# One send's own cost in the client: asyncio rounding its timer up to the millisecond and the
# client's work before the request leaves. Measured idle (15 runs on an AMD EPYC): a lone
# request 0.6-1.6 ms late, the second of a pair 1.3-3.0 ms. After the fast group's 200 tests in
# CI a send has taken 6.2 ms with the probe's waits at 0.35 ms at most (the in-process cost the
# probe cannot see: the test freezes the heap earlier tests left, so no full garbage collection
# runs during the level).
SEND_COST_S = 0.006


def test_a_trace_level_sends_each_request_at_its_arrival_over_the_scale(tmp_path):
    """Arrivals 0, 0.4, 0.4, 1.2 s replayed twice as fast on the reference server: each request
    leaves at half its arrival time (the schedule the client records, and when it sent), never
    before it, and late by no more than the machine's waits measured alongside (its timer's, one
    turn for a CPU) and one send's own cost, counted from its time or from the client's last
    other send while it waited (the second of a pair waits for the first's send: one event
    loop). A client that waited for one request's answer before the next (a 60 ms reply here)
    fails it; a CI run failed the older bound, one send's cost from its time, on the pair's
    second (10.4 ms late, the first 3.4 ms) while the probe saw waits of 2.8 ms."""
    arrivals = (0.0, 0.4, 0.4, 1.2)
    requests = [LoadRequest(f"trace-{i}#0", "hello world", 2, 3) for i in range(len(arrivals))]
    gc.collect()
    gc.freeze()
    try:
        with (
            ReferenceServer("reference", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=20)) as server,
            SchedulingJitter() as jitter,
        ):
            run = asyncio.run(
                run_level(
                    server.base_url, "reference", requests, concurrency=None, arrivals=TraceArrivals(arrivals, 2.0),
                    seed=0, interval_s=1.0, timeout_s=30, scrape_metrics=False,
                )
            )  # fmt: skip
    finally:
        gc.unfreeze()
    assert run.scheduled == [0.0, 0.2, 0.2, 0.6]
    sends = [s.sent_at - run.started for s in run.results]
    assert all(sent >= due for sent, due in zip(sends, run.scheduled)), (sends, run.scheduled)
    # Late by no more than one send's cost after its time or the client's previous send.
    gaps = [sent - waited_from(due, sent, sends) for sent, due in zip(sends, run.scheduled)]
    assert max(gaps) < jitter.allowance(SEND_COST_S, wakes=2), (sends, gaps, jitter)
    assert all(s.result.success for s in run.results)


def test_a_mooncake_trace_through_the_workload_shares_prompt_blocks_where_its_ids_do(tmp_path, tiny_model):
    from transformers import AutoTokenizer

    from infbench.workload.requests import build_workload

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    path = write_jsonl(tmp_path / "m.jsonl", MOONCAKE)
    workload = {"study_prompts": False, "api": "completions", "source": "trace",
                "trace": {"path": str(path), "format": "auto", "num_requests": 10},
                "synthetic": {"num_requests": 0, "preset": "alpaca"}}  # fmt: skip
    requests, source = build_workload(tokenizer, workload, 256, 16, seed=0, source_path=path)
    assert [r.id for r in requests] == ["trace-000001", "trace-000002", "trace-000003", "trace-000005"]
    assert [r.arrival_s for r in requests] == [0.0, 0.25, 0.25, 2.0] and [r.max_tokens for r in requests] == [
        4,
        3,
        5,
        2,
    ]
    first, second, third = (r.prompt for r in requests[:3])
    assert third[:40] == first[:40] and second[:40] != first[:40]  # block 7 opens rows 1 and 3
    assert source["dropped"] == {"too_long": 1} and source["kept"] == 4 and source["rows_in_source"] == 5
    assert source["span_s"] == 2.0 and source["rate"] == 1.5 and len(source["sha256"]) == 64


def test_the_pipeline_replays_a_trace_and_its_capacity_search_scales_it(tmp_path, tiny_model):
    """The reference server as the endpoint (what is under test is the replay, not vLLM): the
    trace levels' schedules are the trace's arrivals over each scale, and the rate search's
    probes replay the trace at rate / the trace's rate. Sixty requests: the trace is the pool, and
    a probe at c=2 needs 35 or more counted, all within the SLO, to be met and seed the rate search."""
    workdir = copy_checkout(tmp_path / "project")
    trace = [{"timestamp_s": i * 0.05, "input_length": 20, "output_length": 4} for i in range(60)]
    write_jsonl(workdir / "trace.jsonl", trace)
    with ReferenceServer("served", tmp_path / "server.log", Schedule(ttft_ms=20, itl_ms=5)) as server:
        config = tiny_config(
            tiny_model,
            hf_baseline={"enabled": False},
            vllm_offline={"enabled": False},
            server={"warm_requests": 1, "external": {"base_url": f"{server.base_url}/v1", "model": "served"}},
            load={"concurrency": [2], "request_rates": [], "ramp": None, "window_s": 0.05, "window_requests": 4,
                  "trace_scales": [1.0, 2.0], "repeats": 1},
            capacity={"start_concurrency": 2, "max_concurrency": 2, "rate": True, "max_probes": 2},
        )  # fmt: skip
        config["workload"].update(source="trace", trace={"path": "trace.jsonl", "num_requests": 60})
        write_config(workdir, config)
        snakemake(workdir, "--cores", "2")
    results = workdir / "results/tiny"
    summary = read_json(results / "workload_summary.json")
    assert summary["source"]["kind"] == "trace" and summary["source"]["rate"] == pytest.approx(20.0)
    assert summary["provenance"]["inputs"]["workload.trace"] == summary["source"]["sha256"]
    load = read_json(results / "load.json")
    validate(load, "load")
    traced = [level for level in load["levels"] if level["mode"] == "trace"]
    assert [level["trace_scale"] for level in traced] == [1.0, 2.0]
    for level in traced:
        requests = level["repeats"][0]["requests"]
        assert len(requests) == 60 and level["failed"] == 0
        assert [r["scheduled_s"] for r in requests] == pytest.approx(
            [t["timestamp_s"] / level["trace_scale"] for t in trace]
        )
    capacity = read_json(results / "capacity.json")
    rate = capacity["request_rate"]
    assert capacity["concurrency"]["capacity"] == 2, capacity["concurrency"]["probes"]
    assert rate["trace_rate"] == pytest.approx(20.0)
    for probe in rate["probes"]:
        assert probe["trace_scale"] == pytest.approx(probe["load"] / 20.0)
        assert all(one["sent"] == 60 for one in probe["pass_records"])  # the trace once a pass, no more
    report = (workdir / "results/report.html").read_text()
    assert "replayed at their arrival times" in report and "replays the workload's trace" in report


def test_a_dropped_first_row_does_not_delay_the_replay_and_distinct_blocks_share_no_prefix(tmp_path, tiny_model):
    """The first row is too long: the replay's clock starts at the first kept row. And 2,000
    distinct block ids give 2,000 distinct openings (a passage's rotations, the planted fault,
    have only a few hundred)."""
    from transformers import AutoTokenizer

    from infbench.workload.requests import build_workload, seeded_text

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    rows = [{"timestamp": 500, "input_length": 9000, "output_length": 4, "hash_ids": [1]}, *MOONCAKE[:3]]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    workload = {"study_prompts": False, "api": "completions", "source": "trace",
                "trace": {"path": str(path), "format": "auto", "num_requests": 10},
                "synthetic": {"num_requests": 0, "preset": "alpaca"}}  # fmt: skip
    requests, source = build_workload(tokenizer, workload, 256, 16, seed=0, source_path=path)
    assert [r.arrival_s for r in requests] == [0.0, 0.25, 0.25] and source["span_s"] == 0.25
    openings = {tuple(tokenizer(seeded_text(tokenizer, f"block-{i}", 32))["input_ids"][:16]) for i in range(2000)}
    assert len(openings) == 2000
