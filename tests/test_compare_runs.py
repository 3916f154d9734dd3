"""Comparing real runs of the tiny model: the same settings twice, one engine setting changed,
a run packed on one machine and compared on another, and vLLM's own result file, through the
command a user (or a CI job) runs."""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO, copy_checkout, snakemake, tiny_config, write_config

from infbench.core.artifacts import read_json
from infbench.runs.comparison import FASTER, NO_DIFFERENCE, NO_INTERVAL, SLOWER

RUNS = [sys.executable, str(REPO / "scripts" / "runs.py")]
# The serving stage alone, at one closed-loop level with three passes (intervals across passes
# need them: with two, t = 12.7), so that a run is little more than a server start.
SERVING_ONLY = {
    "hf_baseline": {"enabled": False},
    "vllm_offline": {"enabled": False},
    "client_fidelity": {"enabled": False},
    "tuning": {"enabled": False},
    "prefix_caching": {"enabled": False},
    "server": {"warm_requests": 1},
    "load": {"concurrency": [4], "chat_concurrency": [], "request_rates": [], "ramp": None, "repeats": 3},
}


def runs_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*RUNS, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def serving_runs(tmp_path_factory, tiny_model) -> dict[str, Path]:
    """Three runs of the tiny model's serving stage, one after another: the same settings twice,
    then with vLLM scheduling one request per step (engine.max_num_seqs: 1)."""
    runs = {}
    for name, engine in (("same", {}), ("same-again", {}), ("one-seq", {"max_num_seqs": 1})):
        workdir = copy_checkout(tmp_path_factory.mktemp(name))
        config = tiny_config(tiny_model, **json.loads(json.dumps(SERVING_ONLY)))
        config["engine"].update(engine)
        write_config(workdir, config)
        # The serving artifacts only: the report and the KV check are not compared.
        snakemake(workdir, "--cores", "8", "results/tiny/load.json")
        runs[name] = workdir
    return runs


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
    assert verdicts(comparison, "output_throughput") == {"c=4": NO_DIFFERENCE}
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
    assert record["differences"][0]["values"] == ["(absent)", "1"]
    assert record["runs"][1]["label"] == "engine.max_num_seqs=1"
    # At concurrency 4 every request but one waits: the first token comes later and throughput falls.
    assert verdicts(comparison, "median_ttft_ms")["c=4"] == SLOWER
    assert verdicts(comparison, "output_throughput")["c=4"] == SLOWER
    # The gate: exit 1, naming each regressed figure and by how much; the page is written first.
    assert result.returncode == 1, result.stdout + result.stderr
    assert "regressed: tiny/serve/c=4/median_ttft_ms +" in result.stderr
    assert "regressed: tiny/serve/c=4/output_throughput -" in result.stderr
    page = (tmp_path / "seq.html").read_text()
    assert "What differs between them" in page and "engine.max_num_seqs" in page and "gated figure(s) regressed" in page
    assert page.count("<figure>") == 1 and "data-clipped-text" not in page  # one ratio plot, every label inside it
    # The reverse comparison is faster, and gating it passes.
    reverse = runs_cli("compare", one_seq, same, "--json", "rev.json", "--html", "rev.html", *gated, cwd=tmp_path)
    assert reverse.returncode == 0, reverse.stderr
    assert verdicts(read_json(tmp_path / "rev.json")["comparisons"][0], "median_ttft_ms")["c=4"] == FASTER
    # A gate that names no figure is bad input, not a pass.
    typo = runs_cli("compare", same, one_seq, "--gate", "*/serve/c=5/output_throughput", cwd=tmp_path)
    assert typo.returncode == 2 and "matches none of the" in typo.stderr


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
    """workflow/compare/Snakefile with the candidate as an http:// URL, fetched by Snakemake's
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
                "--snakefile", str(REPO / "workflow" / "compare" / "Snakefile"),
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
