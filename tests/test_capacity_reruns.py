"""capacity.runs: the search run again on servers of its own, the median run as the headline, a
prediction interval a rerun falls in (docs/method.md#capacity-reruns), and the run comparison
over those runs."""

import math

import numpy as np
import pytest
from conftest import REPO

from infbench.capacity.estimate import rerun_interval
from infbench.capacity.measure import across_runs, search_runs
from infbench.core.capacity_terms import rerun_text
from infbench.engines.vllm_server import ServerError
from infbench.report.render import render
from infbench.report.run_comparison_page import build_comparison_context
from infbench.runs.comparison import capacity_verdict, comparison_record, gate, gate_record, search_bounds
from infbench.runs.results import RunResults, run_provenance
from infbench.serving.reference_server import ReferenceServer, Schedule
from infbench.serving.window import PoolRanDry


def test_the_rerun_interval_is_students_prediction_interval_on_the_log_scale():
    # Worked apart from the code: ln 4, ln 5, ln 8 -> mean 1.691725, sd 0.353824;
    # t_{0.975, 2} = 4.302653, sqrt(1 + 1/3) = 1.154701: half-width 1.757896,
    # exp(1.691725 -+ 1.757913) = 0.93596, 31.488.
    interval = rerun_interval([4, 5, 8], integer=False)
    assert interval["ci95"] == pytest.approx([0.93596, 31.488], rel=1e-3)
    assert interval["geometric_mean"] == pytest.approx(5.429, rel=1e-3)
    # A concurrency is widened to the whole requests around it.
    assert rerun_interval([4, 5, 8], integer=True)["ci95"] == [0, 32]
    # Identical runs: no spread, yet never narrower than a run's own interval.
    assert rerun_interval([6, 6, 6], [[6, 7], [5, 6], [6, 6]], integer=True)["ci95"] == [5, 7]
    # A run's own interval open-ended: so is a rerun's, no interval.
    assert rerun_interval([6, 6, 6], [[6, "above"], None, [6, 6]], integer=True)["ci95"] is None
    # A run off its probed range, or one run only: no interval.
    assert rerun_interval([6, "above", 7], integer=True)["ci95"] is None
    assert rerun_interval([6], integer=True)["ci95"] is None


@pytest.mark.parametrize("runs", [3, 5])
def test_a_rerun_falls_in_the_interval_as_often_as_it_claims(runs):
    """Log-normal runs (a machine's drift multiplies a capacity): over 4,000 seeded trials, the
    interval from `runs` runs holds one more run in 95 % of them, within 1 % (the binomial's
    standard error at 4,000 is 0.34 %). An interval for the mean instead (no 1 + 1/n) holds
    84 % at 3 runs, a normal quantile for t's 81 %."""
    rng = np.random.default_rng(7)
    trials = 4000
    held = 0
    for _ in range(trials):
        values = np.exp(rng.normal(math.log(20), 0.3, size=runs + 1))
        low, high = rerun_interval(values[:runs].tolist(), integer=False)["ci95"]
        # The interval's ends are rounded to 3 decimals: compare at that precision.
        held += low - 1e-3 <= values[runs] <= high + 1e-3
    assert abs(held / trials - 0.95) < 0.01


def search_record(fitted, capacity=None, outcome="bracketed"):
    """A search's record cut to what runs read: its bracket's met end `capacity` (default: the
    fitted value) apart from its `fitted` capacity."""
    capacity = fitted if capacity is None else capacity
    estimate = {"value": fitted, "ci95": [fitted, fitted + 1], "lowest_probe": 1, "highest_probe": 64}
    return {"capacity": capacity, "first_failing": capacity + 1, "outcome": outcome, "estimate": estimate}


def run_record(fitted, index, capacity=None):
    return {
        "concurrency": search_record(fitted, capacity),
        "kv": {"run": index},
        "run": index + 1,
        "started": 100.0 + index,
        "seconds": 60.0,
    }


def test_the_headline_is_the_median_run_by_fitted_capacity_with_every_run_beside_it():
    # By fitted capacity run 3 (6) is the median; by the brackets' met ends it would be run 1 (5).
    found = across_runs([run_record(v, i, c) for i, (v, c) in enumerate([(9, 5), (4, 9), (6, 1)])])
    assert found["concurrency"]["estimate"]["value"] == 6 and found["kv"] == {"run": 2}  # the median run's, whole
    assert [(r["run"], r["concurrency"]["estimate"]["value"], r["headline"]) for r in found["runs"]] == [
        (1, 9, False),
        (2, 4, False),
        (3, 6, True),
    ]
    assert found["rerun_interval"]["concurrency"]["values"] == [9, 4, 6]
    assert "started" not in found and "run" not in found and "request_rate" not in found["rerun_interval"]
    # Even runs: the lower of the middle two, so the headline never leans high.
    even = across_runs([run_record(v, i) for i, v in enumerate([9, 4, 6, 7])])
    assert even["concurrency"]["estimate"]["value"] == 6
    # One run: its record as it was, without runs or an interval.
    single = across_runs([run_record(5, 0)])
    assert "runs" not in single and "rerun_interval" not in single and single["concurrency"]["capacity"] == 5
    assert rerun_text("concurrency", single).startswith("not measured: one run")
    assert rerun_text("concurrency", found).startswith("below c=1 to c=45 (95 % prediction over 3 runs: c=9, c=4, c=6)")


def test_each_run_searches_on_a_server_started_for_it_and_stopped_before_the_next(tmp_path):
    """Three runs on the reference server, each of its own KV pool: a process per run, alive
    while its run searches and gone before the next starts, each run's KV facts read from its
    own server; run 2's server fails to start, is recorded as failed, and runs 1 and 3 are kept.
    A failure before any run completed ends the stage (it would recur), as does one that is not
    the server's (a pool run dry: a setting to change)."""
    servers, lines = [], []

    def new_server(run):
        if run == 2:
            raise ServerError("the server exited before it was ready (log: server2.log)\nits log ends with: ...")
        servers.append(ReferenceServer("ref", tmp_path / f"server{run}.log", Schedule(num_blocks=100 * run)))
        return servers[-1]

    def search_on(server, kv):
        assert server.process.poll() is None  # this run's server is up
        assert all(old.process.poll() is not None for old in servers[:-1])  # earlier ones are gone
        # Each run's requests come back numbered run 1 (request_table.probe_rows).
        requests = [{"run": 1, "pool": kv["num_blocks"]}]
        return {"concurrency": search_record(kv["num_blocks"] // 100), "requests": requests}

    found = search_runs(3, new_server, search_on, progress=lines.append)
    assert len(servers) == 2 and servers[0].process.pid != servers[1].process.pid
    assert all(s.process.poll() is not None for s in servers)
    assert [(r["run"], r["concurrency"]["capacity"]) for r in found["runs"]] == [(1, 1), (3, 3)]
    assert found["failed_runs"] == [{"run": 2, "error": "the server exited before it was ready (log: server2.log)"}]
    assert "capacity run 2 of 3 failed: the server exited before it was ready (log: server2.log)" in lines
    assert all(r["seconds"] > 0 for r in found["runs"])
    assert found["requests"] == [{"run": 1, "pool": 100}, {"run": 3, "pool": 300}]  # renumbered by run
    # Run 1 failing, or the one run: the failure ends the stage.
    with pytest.raises(ServerError):
        search_runs(1, lambda run: new_server(2), search_on, progress=lines.append)
    starts = []

    def first_fails(run):
        starts.append(run)
        return new_server(2)

    with pytest.raises(ServerError):
        search_runs(3, first_fails, search_on, progress=lines.append)
    assert starts == [1]

    def pool_dry(server, kv):
        if len(servers) == 3:
            return search_on(server, kv)
        raise PoolRanDry("the request pool ran out: raise workload.pool_requests")

    with pytest.raises(PoolRanDry):
        search_runs(2, lambda run: new_server(run + 2), pool_dry, progress=lines.append)
    assert all(s.process.poll() is not None for s in servers)
    # One run of three left: it is the headline, with the failures beside it and no interval.
    servers.clear()
    one = search_runs(3, lambda run: new_server(2 if run > 1 else 1), search_on, progress=lines.append)
    assert [r["run"] for r in one["runs"]] == [1] and [f["run"] for f in one["failed_runs"]] == [2, 3]
    assert rerun_text("concurrency", one) == "not measured: 1 run completed (c=1)"


def run_factory(source, models) -> RunResults:
    return RunResults(source, "infbench", models, run_provenance(models))


def capacity_runs(values):
    """capacity.json cut to what a comparison reads, with capacity.runs of `values`."""
    middle = sorted(values)[(len(values) - 1) // 2]
    return {
        "slo_ms": {"ttft": 1000},
        "concurrency": search_record(middle),
        "rerun_interval": {"concurrency": rerun_interval(values, [[v, v + 1] for v in values], integer=True)},
    }


def test_runs_compare_by_their_spread_not_by_one_runs_narrow_interval():
    """Each run's own interval is one request wide, so the headline runs alone read "lower"
    (7 [7, 8] against 9 [9, 10]); over three runs each, drift of this size is no difference,
    and a fall beyond it is lower and fails the gate."""
    base = run_factory("a", {"m": {"capacity": capacity_runs([9, 7, 12])}})
    drifted = run_factory("b", {"m": {"capacity": capacity_runs([6, 7, 11])}})
    headlines = [search_bounds("concurrency", run.models["m"]["capacity"]["concurrency"]) for run in (base, drifted)]
    assert capacity_verdict(*headlines) == "lower"
    fallen = run_factory("c", {"m": {"capacity": capacity_runs([3, 4, 3])}})
    single = run_factory("d", {"m": {"capacity": {"slo_ms": {"ttft": 1000}, "concurrency": search_record(6)}}})
    record = comparison_record([base, drifted, fallen, single], threshold=0.05, labels=["a", "b", "c", "d"])
    rows = [c["capacities"][0] for c in record["comparisons"]]
    assert [row["verdict"] for row in rows] == ["no difference detected", "lower", "lower"]
    assert rows[0]["runs"]["ratio"]["ci95_low"] < 1 < rows[0]["runs"]["ratio"]["ci95_high"]
    assert rows[2]["runs"] is None  # one run against three: by the intervals
    lines = gate(comparison_record([base, drifted], threshold=0.05, labels=["a", "b"]), ["*/capacity/*"])
    assert lines == []
    lines = gate(comparison_record([base, fallen], threshold=0.05, labels=["a", "c"]), ["*/capacity/*"])
    assert len(lines) == 1 and "over capacity.runs [3, 4, 3] against [9, 7, 12]" in lines[0]
    assert "lies wholly below 1" in lines[0]
    html = render(
        build_comparison_context({**record, "gate": gate_record(record, ["*/capacity/*"])}),
        REPO / "report" / "run_comparison.html.j2",
    )
    assert "9, 7, 12 -&gt; 6, 7, 11: 0.86x" in html and "not over runs (one side ran once" in html
    # Runs that agree to the request on both sides: a t interval would be a point, the
    # headlines' own intervals judge.
    same = run_factory("e", {"m": {"capacity": capacity_runs([9, 9, 9])}})
    fewer = run_factory("f", {"m": {"capacity": capacity_runs([8, 8, 8])}})
    (row,) = comparison_record([same, fewer], threshold=0.05, labels=["e", "f"])["comparisons"][0]["capacities"]
    assert row["runs"] is None and row["verdict"] == "no difference detected"  # 8 [8, 9] and 9 [9, 10] share 9


def test_a_check_names_every_run_that_failed_or_did_not_converge():
    from infbench.capacity.checks import capacity_checks

    runs = across_runs([run_record(v, i) for i, v in enumerate([9, 4, 6])])["runs"]
    runs[1]["concurrency"]["outcome"] = "out_of_time"
    name = "every capacity run completed and converged"
    (check,) = capacity_checks({"runs": runs, "failed_runs": [{"run": 4, "error": "the server exited"}]})
    assert (check["name"], check["status"], check["value"]) == (name, "warn", 2)
    assert check["detail"] == "run 4 failed: the server exited; run 2 concurrency search out of time (of 4 runs)"
    runs[1]["concurrency"]["outcome"] = "bracketed"
    (check,) = capacity_checks({"runs": runs})
    assert (check["status"], check["detail"]) == ("pass", "3 runs, each bracketed")
    assert capacity_checks({}) == []  # one run: its searches' own checks only
