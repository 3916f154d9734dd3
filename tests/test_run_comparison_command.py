"""Comparing runs through the command a user (or a CI job) runs: runs built from the tiny run's
real serving artifacts, the same again with other noise and with a planted slowdown (the
statistics and the gate are under test, not vLLM), a run packed on one machine and compared on
another, and vLLM's own result file from the tiny run."""

from __future__ import annotations

import copy
import functools
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO

from infbench.core.artifacts import read_json
from infbench.runs.comparison import FASTER, NO_DIFFERENCE, NO_INTERVAL, SERVING_METRICS, SLOWER

RUNS = [sys.executable, str(REPO / "scripts" / "runs.py")]
# Four passes per level in every planted run, each the tiny run's first real pass of that level
# times a planted noise: the spread is the test's, not the machine's, so the verdicts are known
# in advance (with two passes, t = 12.7; with four, 3.18).
PASSES = 4


def runs_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*RUNS, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)


def planted_run(tiny_run: Path, destination: Path, noise: list[float], scale: dict | None = None, engine=None) -> Path:
    """A run built from the tiny run's real serving artifacts: every level's passes made PASSES
    copies of its first real pass, figure i times (1 + noise[i]) and times scale[metric] (a
    planted slowdown), and `engine` settings written into every artifact's provenance (what a
    changed setting leaves there)."""
    results = destination / "results" / "tiny"
    results.mkdir(parents=True)
    for name in ("server.json", "load.json", "workload_summary.json"):
        artifact = read_json(tiny_run / "results" / "tiny" / name)
        for level in artifact.get("levels", []):
            real = level["repeats"]
            level["repeats"] = []
            for index in range(PASSES):
                planted = copy.deepcopy(real[0])
                for metric in SERVING_METRICS:
                    if planted.get(metric) is not None:
                        planted[metric] *= (1 + noise[index]) * (scale or {}).get(metric, 1.0)
                level["repeats"].append(planted)
        if engine:
            artifact["provenance"]["config"].setdefault("engine", {}).update(engine)
        (results / name).write_text(json.dumps(artifact))
    return destination


@pytest.fixture(scope="module")
def serving_runs(tmp_path_factory, tiny_run) -> dict[str, Path]:
    """The tiny run's serving levels as three runs: a baseline, the same again with other noise,
    and one where vLLM scheduled one request per step (engine.max_num_seqs: 1), planted as a
    first token twice as late and half the throughput."""
    root = tmp_path_factory.mktemp("runs")
    slower = {"median_ttft_ms": 2.0, "median_e2el_ms": 2.0, "output_throughput": 0.5, "request_goodput": 0.5}
    return {
        "same": planted_run(tiny_run, root / "same", [-0.03, 0.01, 0.03, -0.01]),
        "same-again": planted_run(tiny_run, root / "same-again", [0.02, -0.02, 0.0, 0.01]),
        "one-seq": planted_run(tiny_run, root / "one-seq", [0.01, -0.01, 0.02, -0.02], slower, {"max_num_seqs": 1}),
    }


def verdicts(comparison: dict, metric: str) -> dict[str, str]:
    """level -> verdict of one serving metric."""
    return {f["case"]: f["verdict"] for f in comparison["figures"] if f["stage"] == "serve" and f["metric"] == metric}


def ratios(comparison: dict, metric: str) -> dict[str, tuple[float, float, float]]:
    return {
        f["case"]: (round(f["ratio"], 3), round(f["ci95_low"], 3), round(f["ci95_high"], 3))
        for f in comparison["figures"]
        if f["metric"] == metric
    }


def test_the_same_settings_twice_show_no_throughput_difference(serving_runs, tmp_path):
    first, again = serving_runs["same"], serving_runs["same-again"]
    result = runs_cli("compare", first, again, "--json", "same.json", "--html", "same.html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    record = read_json(tmp_path / "same.json")
    comparison = record["comparisons"][0]
    print("same settings, output throughput:", ratios(comparison, "output_throughput"))
    levels = verdicts(comparison, "output_throughput")
    assert levels and set(levels.values()) == {NO_DIFFERENCE}, levels
    # Nothing that shapes a measurement differs (config, versions, machine, commit), so the runs
    # are named by where they are.
    assert not [d["key"] for d in record["differences"] if d["key"].startswith(("config.", "versions.", "machine."))]
    assert [run["label"] for run in record["runs"]] == [str(first), str(again)]


def test_one_request_per_step_is_slower_and_the_gate_fails_on_it(serving_runs, tmp_path):
    same, one_seq = serving_runs["same"], serving_runs["one-seq"]
    gated = ["--gate", "*/serve/c=4/median_ttft_ms", "--gate", "*/serve/c=4/output_throughput"]
    result = runs_cli("compare", same, one_seq, "--json", "seq.json", "--html", "seq.html", *gated, cwd=tmp_path)
    record = read_json(tmp_path / "seq.json")
    comparison = record["comparisons"][0]
    for metric in ("output_throughput", "median_ttft_ms"):
        print(metric, ratios(comparison, metric))
    # What differs comes first and names the runs.
    assert record["differences"][0]["key"] == "config.engine.max_num_seqs"
    assert record["differences"][0]["values"][1] == "1"
    assert record["runs"][1]["label"] == "engine.max_num_seqs=1"
    # The planted slowdown: the first token later and throughput down at every level.
    assert verdicts(comparison, "median_ttft_ms")["c=4"] == SLOWER
    assert verdicts(comparison, "output_throughput")["c=4"] == SLOWER
    # The gate: exit 1, naming each regressed figure and by how much; the page is written first.
    assert result.returncode == 1, result.stdout + result.stderr
    assert "regressed: tiny/serve/c=4/median_ttft_ms +" in result.stderr
    assert "regressed: tiny/serve/c=4/output_throughput -" in result.stderr
    page = (tmp_path / "seq.html").read_text()
    assert (
        "What differs between them" in page
        and "engine.max_num_seqs" in page
        and "gated figure(s) failed the gate" in page
    )
    assert page.count("<figure>") == 1 and "data-unreadable-text" not in page  # one ratio plot, every label inside it
    # The reverse comparison is faster, and gating it passes.
    reverse = runs_cli("compare", one_seq, same, "--json", "rev.json", "--html", "rev.html", *gated, cwd=tmp_path)
    assert reverse.returncode == 0, reverse.stderr
    # A passed gate says what it could have caught, so that it is not read as "no regression".
    assert "gate: passed; not proof of no regression: were these runs' own spread the true one, the gate would" in (
        reverse.stdout
    )
    passed_page = (tmp_path / "rev.html").read_text()
    assert "What it could have caught: were these runs&#39; own spread" in passed_page
    assert "A passed gate is no proof" in passed_page and "A passed gate is no proof" not in page
    assert "gated figure(s) failed the gate (were these runs' own spread" in result.stderr
    assert verdicts(read_json(tmp_path / "rev.json")["comparisons"][0], "median_ttft_ms")["c=4"] == FASTER
    # A gate that names no figure is bad input, not a pass.
    typo = runs_cli("compare", same, one_seq, "--gate", "*/serve/c=5/output_throughput", cwd=tmp_path)
    assert typo.returncode == 2 and "matches none of the" in typo.stderr


def test_a_slowdown_inside_the_noise_is_not_called_and_one_past_it_is(tiny_run, tmp_path):
    """The verdict follows the interval: a first token 20 % later is no difference when passes
    spread by 6 % (the interval reaches into the 10 % band), and 25 % later is slower when they
    spread by 2 %. An interval too narrow (a normal quantile, or sd / n) calls the first slower;
    one too wide (too few degrees of freedom) misses the second."""
    later = {"median_ttft_ms": 1.2, "median_e2el_ms": 1.2}
    noisy = planted_run(tiny_run, tmp_path / "noisy", [-0.06, 0.02, 0.06, -0.02])
    noisy_later = planted_run(tiny_run, tmp_path / "noisy-later", [0.05, -0.03, -0.05, 0.03], later)
    quiet = planted_run(tiny_run, tmp_path / "quiet", [-0.02, 0.01, 0.02, -0.01])
    quiet_later = planted_run(tiny_run, tmp_path / "quiet-later", [0.01, -0.02, 0.02, -0.01], {"median_ttft_ms": 1.25})
    for baseline, candidate, expected in ((noisy, noisy_later, NO_DIFFERENCE), (quiet, quiet_later, SLOWER)):
        result = runs_cli("compare", baseline, candidate, "--json", "c.json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        comparison = read_json(tmp_path / "c.json")["comparisons"][0]
        print(candidate.name, ratios(comparison, "median_ttft_ms"))
        levels = verdicts(comparison, "median_ttft_ms")
        assert levels and set(levels.values()) == {expected}, (candidate.name, levels)


def test_a_packed_run_compares_elsewhere_without_rerunning(serving_runs, tmp_path):
    packed = runs_cli("pack", serving_runs["one-seq"], "-o", tmp_path / "node.tar.gz", cwd=tmp_path)
    assert packed.returncode == 0, packed.stderr
    # Unpacked on "another machine": a folder with no engine, no model weights and no Snakemake state.
    unpacked = runs_cli("unpack", tmp_path / "node.tar.gz", "-o", tmp_path / "laptop" / "node-run", cwd=tmp_path)
    assert unpacked.returncode == 0, unpacked.stderr
    assert not list((tmp_path / "laptop").rglob("*.safetensors"))
    for candidate in (tmp_path / "node.tar.gz", tmp_path / "laptop" / "node-run"):
        result = runs_cli("compare", serving_runs["same"], candidate, "--json", "c.json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert verdicts(read_json(tmp_path / "c.json")["comparisons"][0], "median_ttft_ms")["c=4"] == SLOWER


def test_a_vllm_bench_result_file_sits_beside_a_run(tiny_run, tmp_path):
    """The file `vllm bench serve --save-result` wrote in the tiny run's client-fidelity stage
    (vLLM's client at concurrency 4 on the tiny model), read into a comparison with the run's
    serving levels, with only the figures it has."""
    result_file = tiny_run / "results" / "tiny" / "client_fidelity" / "vllm_bench.json"
    assert read_json(result_file)["backend"] == "openai"  # vLLM's own file, as it saved it
    result = runs_cli("compare", tiny_run, result_file, "--json", "v.json", "--html", "v.html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    record = read_json(tmp_path / "v.json")
    assert record["runs"][1]["tool"] == "vllm bench serve"
    assert record["differences"][0]["key"] == "tool"
    comparison = record["comparisons"][0]
    # Only the c=4 level, only the figures the file has, each from one run: no interval, no verdict.
    compared = {(f["case"], f["metric"]) for f in comparison["figures"]}
    metrics = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms", "median_e2el_ms")
    assert compared == {("c=4", metric) for metric in metrics}
    assert {f["verdict"] for f in comparison["figures"]} == {NO_INTERVAL}
    assert "tiny/serve/c=4/request_goodput" in comparison["only_in_baseline"]
    page = (tmp_path / "v.html").read_text()
    assert "vllm bench serve" in page and "one `vllm bench serve` run" in page


def test_the_comparison_workflow_reads_a_run_through_a_storage_plugin(serving_runs, tmp_path):
    """workflow/run_comparison/Snakefile with the candidate as an http:// URL, fetched by Snakemake's
    http storage plugin from a server in this process."""
    runs_cli("pack", serving_runs["one-seq"], "-o", tmp_path / "served" / "node.tar.gz", cwd=tmp_path)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "served"))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/node.tar.gz"
        workdir = tmp_path / "comparing"
        workdir.mkdir()
        result = subprocess.run(
            [
                str(Path(sys.executable).parent / "snakemake"),
                "--snakefile", str(REPO / "workflow" / "run_comparison" / "Snakefile"),
                "--directory", str(workdir),
                "--cores", "1",
                "--config", f"runs=[{serving_runs['same']}, {url}]", "threshold=0.1",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )  # fmt: skip
        server.shutdown()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = read_json(workdir / "comparisons" / "comparison.json")
    assert [run["source"] for run in record["runs"]] == [str(serving_runs["same"]), url]
    assert record["threshold"] == 0.1
    assert verdicts(record["comparisons"][0], "median_ttft_ms")["c=4"] == SLOWER
    assert (workdir / "comparisons" / "comparison.html").is_file()
