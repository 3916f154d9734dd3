"""Shared fixtures: the embedded model converted once, a tiny 2-layer model cut from it, and
helpers to run the real workflow in a scratch working directory."""

from __future__ import annotations

import copy
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("INFBENCH_TEST_CACHE", REPO / ".test-cache"))


def load_default_config() -> dict:
    with open(REPO / "config" / "config.yaml") as handle:
        return yaml.safe_load(handle)


@pytest.fixture
def default_config() -> dict:
    return copy.deepcopy(load_default_config())


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    """The embedded default model, converted by the real `model` code once per cache."""
    from infbench.model.download import download_model
    from infbench.model.folder import resolve_model

    spec = {"name": "smollm2-135m-instruct", "source": "embedded"}
    folder = CACHE / "models" / spec["name"]
    if not (folder / "model.json").is_file():
        download_model(spec, CACHE / "downloads" / spec["name"])
        resolve_model(spec, folder, CACHE / "downloads" / spec["name"])
    return folder


@pytest.fixture(scope="session")
def tiny_model(embedded_model) -> Path:
    """The first two layers of the embedded model with its real tokenizer: same shapes per
    layer and the same vocabulary, about 15x less compute, so engine tests run fast."""
    from infbench.model.folder import truncate_layers

    folder = CACHE / "models" / "tiny-smollm2-2layers"
    if not (folder / "config.json").is_file():
        truncate_layers(embedded_model, folder, num_layers=2)
    return folder


TEST_CONFIG = REPO / ".test" / "config" / "config.yaml"
# Every rule downstream of the model folder, with two offline rounds as in the
# test configuration.
PIPELINE_RULES = {
    "model",
    "workload",
    "hf_baseline",
    "vllm_offline",
    "hf_baseline_round",
    "vllm_offline_round",
    "offline_comparison",
    "allocator",
    "serve",
    "client_fidelity",
    "kv_validation",
    "prefix_caching",
    "variants",
    "capacity",
    "paging_live",
    "utilisation",
    "html_report",
}


def merge_config(base: dict, overlay: dict) -> dict:
    """`overlay` over `base` as Snakemake merges a --configfile over the Snakefile's configfile:
    mappings key by key, recursively; any other value (a list too) replaces the base's."""
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_config(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def tiny_config(model_dir: Path, **overrides) -> dict:
    """The test configuration on the tiny model: the overlay .test/config/config.yaml merged over
    config/config.yaml (as `--configfile .test/config/config.yaml` does), with `overrides`
    merged into its sections."""
    config = merge_config(load_default_config(), yaml.safe_load(TEST_CONFIG.read_text()))
    config["models"][0]["path"] = str(model_dir)
    for section, values in overrides.items():
        config[section].update(values)
    return config


def tiny_run_config(model_dir: Path) -> dict:
    """The tiny run's configuration: the test configuration with users in chat sessions as serve
    levels on vLLM (load.users, load.session_ramp), here only: they would cost every other
    pipeline run of the tests about 15 s."""
    sessions = {"users": [4], "session_ramp": {"start_rate": 2.0, "end_rate": 8.0, "sessions": 8}}
    return tiny_config(model_dir, load=sessions)


def snakemake(
    workdir: Path, *args: str, check: bool = True, timeout: float = 1800, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the real snakemake CLI in `workdir`: on the workdir's own Snakefile where it is a
    project (a copy of this repository), on this repository's otherwise."""
    snakefile = workdir / "Snakefile" if (workdir / "Snakefile").is_file() else REPO / "Snakefile"
    snakemake_bin = str(Path(sys.executable).parent / "snakemake")
    command = [snakemake_bin, "--snakefile", str(snakefile), "--directory", str(workdir), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def dry_run_jobs(stdout: str) -> dict[str, str]:
    """Rule name -> its indented block (input, output, resources, ...) in a dry run's output."""
    import re

    return {
        match.group(1): match.group(2) for match in re.finditer(r"^rule (\w+):\n((?:    .*\n?)*)", stdout, flags=re.M)
    }


def write_config(workdir: Path, config: dict) -> Path:
    path = workdir / "config" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def copy_checkout(destination: Path) -> Path:
    """This repository's files as a user's project would hold them (what git tracks, and new
    files it does not ignore), without results, caches or the virtual environment."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def model_artifact_paths(workdir: Path, model: str = "tiny") -> dict[str, Path]:
    """{stage: path} of one model's artifacts present in a finished run."""
    paths = {"model": workdir / "resources" / "models" / model}
    paths.update({path.stem: path for path in sorted((workdir / "results" / model).glob("*.json*"))})
    return paths


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, tiny_model) -> Path:
    """The whole pipeline on the tiny model, run once with `--cores 8` like a user, in a
    project folder of its own: a copy of this checkout with the test configuration.
    INFBENCH_TINY_RUN=FOLDER reuses a finished one (a developer's rerun of its tests)."""
    if os.environ.get("INFBENCH_TINY_RUN"):
        return Path(os.environ["INFBENCH_TINY_RUN"])
    workdir = copy_checkout(tmp_path_factory.mktemp("tiny-run"))
    write_config(workdir, tiny_run_config(tiny_model))
    snakemake(workdir, "--cores", "8")
    return workdir


# Tests that need a real model, an engine, a server or a pipeline run (any of these fixtures,
# directly or through another) take minutes: `make test-fast` leaves them out.
REAL_MODEL_FIXTURES = {"embedded_model", "tiny_model", "tiny_run"}


def pytest_collection_modifyitems(items):
    for item in items:
        if REAL_MODEL_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)
        function = getattr(item, "function", None)
        if function is not None and "SchedulingJitter" in function.__code__.co_names:
            item.add_marker(pytest.mark.timing)  # `make test` runs these in one process, alone
        if "cluster" in item.fixturenames:  # test_cluster.py's SLURM cluster: `make test-cluster`
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.cluster)


# Student's t_{0.975, df} from a table (not from infbench.core.stats), for tests that recompute
# an artifact's interval from its own samples.
# Student's t_{0.975, df}, as printed in tables to 7 decimals (4 decimals made an interval end
# near zero differ from the code's exact value by more than a relative tolerance allows).
T_975 = {1: 12.7062047, 2: 4.3026527, 3: 3.1824463, 4: 2.7764451, 5: 2.5705818, 6: 2.4469119, 7: 2.3646243}


def reference_mean_interval(values: list[float]) -> tuple[float, float, float]:
    """mean and mean -+ t * s / sqrt(n), the textbook way."""
    import statistics

    n, mean = len(values), statistics.fmean(values)
    half = T_975[n - 1] * statistics.stdev(values) / n**0.5
    return mean, mean - half, mean + half


def reference_paired_ratio(numerator: list[float], denominator: list[float]) -> tuple[float, float, float]:
    """The geometric mean of the pairs' ratios and its interval on the log scale."""
    import math

    mean, low, high = reference_mean_interval([math.log(a / b) for a, b in zip(numerator, denominator)])
    return math.exp(mean), math.exp(low), math.exp(high)


def wilson_95(successes: int, n: int) -> tuple[float, float]:
    """The Wilson score interval, written out here (z = 1.959964), ends exact at 0 and n."""
    z, p = 1.959964, successes / n
    centre, half = p + z * z / (2 * n), z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    low = 0.0 if successes == 0 else (centre - half) / (1 + z * z / n)
    high = 1.0 if successes == n else (centre + half) / (1 + z * z / n)
    return low, high


def binomial_cdf_exact(k: int, n: int, q: float) -> float:
    """P[Binomial(n, q) <= k] from exact binomial coefficients, written apart from the code's
    (capacity/search.py sums log-gamma terms over the shorter tail)."""
    if k < 0:
        return 0.0
    terms = (
        math.exp(math.log(math.comb(n, i)) + i * math.log(q) + (n - i) * math.log1p(-q)) for i in range(min(k, n) + 1)
    )
    return min(1.0, sum(terms))


def reference_decision(met_slo: int, counted: int, target: float, rule, saturated=False, limited=False) -> str:
    """docs/method.md#capacity-decisions and #early-stopping written out apart from
    capacity/probe.py's verdict: Wilson's 95 % interval against the target, or LoadGen's
    odds (met where P[Binomial(n, 1 - p) <= misses] < 1 - c) and the mirror test (missed where
    P[Binomial(n, p) <= met] < 1 - c); missed where saturated, else undecided where the client
    was the limit."""
    if saturated:
        return "missed"
    if counted == 0 or limited:
        return "undecided"
    if rule.name == "early_stopping":
        met = binomial_cdf_exact(counted - met_slo, counted, 1 - target) < 1 - rule.confidence
        missed = binomial_cdf_exact(met_slo, counted, target) < 1 - rule.confidence
    else:
        low, high = wilson_95(met_slo, counted)
        met, missed = low >= target, high < target
    return "missed" if missed else "met" if met else "undecided"


def check_probes(probes: list[dict], settings: dict, target: float) -> None:
    """What every capacity probe of an artifact must hold: its figures the sums of its passes,
    each pass a whole window unless the pool ran out, its interval Wilson's and its decision
    the settings' rule's against the target (never met where the client was the limit)."""
    import pytest

    from infbench.capacity.probe import Rule

    rule = Rule.of(settings)

    for probe in probes:
        passes = probe["pass_records"]
        assert probe["passes"] == len(passes) >= 1
        assert probe["requests"] == sum(p["requests"] for p in passes)
        assert probe["sent"] == sum(p["sent"] for p in passes) > probe["requests"]  # the ramp is not counted
        for one in passes:  # a window of its time and its requests, unless the pool ran out or it was missed
            opened, closed = one["window_s"]
            if one.get("settled_early"):  # its time, and fewer requests: the probe was missed by then,
                # pooled with the windows before, whatever the rest of this one's requests did
                index = passes.index(one)
                prior_met = sum(p["met_slo"] for p in passes[:index])
                prior_n = sum(p["requests"] for p in passes[:index])
                best = prior_met + probe["window"]["min_requests"] - (one["requests"] - one["met_slo"])
                assert reference_decision(best, prior_n + probe["window"]["min_requests"], target, rule) == "missed"
                assert reference_decision(probe["met_slo"], probe["requests"], target, rule) == "missed"
                assert (
                    closed - opened >= probe["window"]["seconds"] and one["requests"] < probe["window"]["min_requests"]
                )
                assert probe["decision"] == "missed" and one is passes[-1]
                continue
            if one.get("closed_at_deadline"):  # capacity.max_search_s ran out: its seconds, fewer requests, no more
                assert closed - opened >= probe["window"]["seconds"] and one is passes[-1]
                assert 1 <= one["requests"] < probe["window"]["min_requests"]
                continue
            assert one["supply_exhausted"] or (
                closed - opened >= probe["window"]["seconds"] and one["requests"] >= probe["window"]["min_requests"]
            )
        assert probe["met_slo"] == sum(p["met_slo"] for p in passes)
        assert probe["attainment"] == pytest.approx(probe["met_slo"] / probe["requests"])
        low, high = probe["attainment_ci95"]
        assert [low, high] == pytest.approx(wilson_95(probe["met_slo"], probe["requests"]), abs=1e-9)
        # A pass's client fell behind when its send lag grew by over a tenth of its window (open
        # loop), or its users thought over a tenth longer than drawn (docs/method.md#sessions).
        for one in passes:
            growth = one["send_lag_growth_ms"]
            figures = one.get("sessions") or {}
            late = (
                bool(figures.get("mean_think_drawn_s"))
                and figures["mean_think_s"] > 1.1 * figures["mean_think_drawn_s"]
            )
            if probe["mode"] in ("concurrency", "users"):
                assert growth is None and one["client_behind"] == late
            else:
                opened, closed = one["window_s"]
                assert one["client_behind"] == (
                    late or (growth is not None and growth > 0.1 * (closed - opened) * 1000)
                )
        # The decision is the interval's against the target; an undecided probe steers by its
        # share, unless its client was the limit: it fell behind and the probe did not miss at
        # the load it got, or it used 80 % of a core and the server did not saturate.
        met_slo, saturated = probe["met_slo"], probe["saturated"]
        missed = reference_decision(met_slo, probe["requests"], target, rule, saturated) == "missed"
        shares = [p["client_cpu_share"] for p in passes if p["client_cpu_share"] is not None]
        assert probe["client_cpu_share"] == (max(shares) if shares else None)
        limited = probe["client_limited"]
        behind = any(p["client_behind"] for p in passes) and not missed
        busy = any(share >= 0.8 for share in shares) and not saturated
        # ... or its event loop stalled in a pass kept (docs/method.md#client-limited-probes).
        stalled = any(p["client_stalled"] for p in passes) and not saturated
        assert all(p["client_stalled"] for p in probe["stalled_passes"])
        assert probe["client_limited_by"] == ["behind"] * behind + ["busy"] * busy + ["stalled"] * stalled
        assert limited == (behind or busy or stalled)
        expected = reference_decision(met_slo, probe["requests"], target, rule, saturated, limited)
        assert probe["decision"] == expected and probe["decided"] == (expected != "undecided")
        # Too few counted requests to be met even all within the SLO: no evidence of met either.
        few = (
            expected == "undecided" and reference_decision(probe["requests"], probe["requests"], target, rule) != "met"
        )
        assert probe["too_few_to_meet"] == few
        assert probe["met"] == (
            expected == "met" or (expected == "undecided" and probe["attainment"] >= target and not limited and not few)
        )
        # More windows only while undecided (and the client kept up).
        assert probe["stopped_early"] == (probe["passes"] < settings["repeats"])
        if probe["stopped_early"]:
            assert probe["decided"] or probe["supply_exhausted"] or limited or probe["out_of_time"]
        # Out of time: a window closed at the deadline, or the windows stopped short of repeats.
        assert not probe["out_of_time"] or passes[-1].get("closed_at_deadline") or probe["stopped_early"]


def searched(tmp_path, schedule, pool, settings, load, progress=lambda line: None, **users) -> dict:
    """search_capacity on a reference server with `schedule`, the pool as workload, no KV facts;
    `users`: sessions and max_users for the users search."""
    from infbench.capacity.measure import search_capacity
    from infbench.serving.reference_server import ReferenceServer

    with ReferenceServer("m", tmp_path / "server.log", schedule) as server:
        return search_capacity(
            server, pool, pool, settings, load, None,
            max_model_len=256, max_num_seqs=None, seed=0, timeout_s=30, progress=progress, **users,
        )  # fmt: skip
