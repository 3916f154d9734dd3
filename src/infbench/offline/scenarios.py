"""The work both offline engines run, defined once so HF and vLLM measure the same thing,
and the bookkeeping they share: RSS sampling and per-scenario summaries."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Protocol

import psutil
from tqdm import tqdm

from infbench.core.metrics import RequestResult, aggregate
from infbench.core.stats import summarize
from infbench.offline.timing import CLOCK
from infbench.workload.requests import WARMUP_MAX_TOKENS

log = logging.getLogger(__name__)

# What the offline intervals cover: repeats run back to back in one process, so they hold
# that process's noise, not drift between jobs or a fresh engine's start.
INTERVAL_SCOPE = "repeats back to back in one process: within-process noise only"

# Scenario metrics summarized over repeats (mean, std, 95 % CI).
SUMMARIZED = (
    "duration",
    "output_throughput",
    "total_token_throughput",
    "request_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "mean_tpot_ms",
    "mean_e2el_ms",
)


@dataclass
class Scenario:
    name: str
    kind: str  # single | sequential | static_batch | continuous
    batches: list[list[dict]]  # requests grouped as they are submitted; [[r] for r in ...] for one at a time
    description: str = ""

    @property
    def num_requests(self) -> int:
        return sum(len(batch) for batch in self.batches)


def build_scenarios(
    workload: list[dict],
    study_max_new_tokens: list[int],
    batch_sizes: list[int],
    continuous: bool,
    *,
    workload_scenarios: bool,
) -> list[Scenario]:
    """The study's single request at each length, longest first (a shorter one's warm-up is
    then covered and cut); with `workload_scenarios`, the whole workload one request at a time,
    in static batches, and (vLLM only, `continuous`) everything submitted at once."""
    scenarios = []
    single = next((r for r in workload if r["kind"] == "study_single"), workload[0])
    for tokens in sorted(study_max_new_tokens, reverse=True):
        request = dict(single, max_tokens=tokens)
        scenarios.append(
            Scenario(f"study_single_{tokens}", "single", [[request]], f"the study's prompt, {tokens} new tokens, alone")
        )
    if not workload_scenarios:
        return scenarios
    scenarios.append(
        Scenario(
            "workload_sequential",
            "sequential",
            [[r] for r in workload],
            "the whole workload one request at a time (a naive server)",
        )
    )
    for size in batch_sizes:
        batches = [workload[i : i + size] for i in range(0, len(workload), size)]
        scenarios.append(
            Scenario(
                f"workload_static_batch_{size}",
                "static_batch",
                batches,
                f"the whole workload in fixed groups of {size}, one group at a time",
            )
        )
    if continuous:
        scenarios.append(
            Scenario(
                "workload_continuous",
                "continuous",
                [list(workload)],
                "the whole workload submitted at once (continuous batching)",
            )
        )
    return scenarios


class RssSampler:
    """Peak resident memory of this process and its children (vLLM's engine core runs in one)."""

    def __init__(self, interval_s: float = 0.05):
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        process = psutil.Process()
        total = process.memory_info().rss
        for child in process.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                continue
        return total

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


@dataclass
class ScenarioRecord:
    scenario: Scenario
    repeats: list[dict] = field(default_factory=list)
    last_requests: list[RequestResult] = field(default_factory=list)
    peak_rss_bytes: int = 0
    extra: dict = field(default_factory=dict)

    def asked(self) -> dict[str, int]:
        return {r["id"]: r["max_tokens"] for batch in self.scenario.batches for r in batch}

    def add_repeat(self, results: list[RequestResult], duration_s: float, peak_rss: int) -> None:
        self.repeats.append(aggregate(results, duration_s))
        self.last_requests = results
        self.peak_rss_bytes = max(self.peak_rss_bytes, peak_rss)

    def to_json(self) -> dict:
        return {
            "name": self.scenario.name,
            "kind": self.scenario.kind,
            "description": self.scenario.description,
            "num_requests": self.scenario.num_requests,
            "batch_sizes": sorted({len(batch) for batch in self.scenario.batches}),
            "repeats": self.repeats,
            "summary": {key: summarize(r[key] for r in self.repeats).to_json() for key in SUMMARIZED},
            "peak_rss_bytes": self.peak_rss_bytes,
            "requests": [{**r.to_json(), "max_tokens": self.asked()[r.request_id]} for r in self.last_requests],
            **self.extra,
        }


@dataclass
class BatchRun:
    results: list[RequestResult]
    token_ids: list[list[int]]
    kv_tokens_held: int | None = None  # token slots a contiguous (padded) cache held, where known


class Runner(Protocol):
    name: str
    timing: dict  # what its TTFT, E2EL and duration measure, and where its token times come from

    def run_batch(self, batch: list[dict]) -> BatchRun: ...

    def engine_report(self) -> dict: ...


def group_extent(group: list[dict]) -> tuple[int, int]:
    """A group's longest prompt and longest output, in tokens: what its padded cache spans."""
    return max(r["prompt_tokens"] for r in group), max(r["max_tokens"] for r in group)


def covered(group: list[dict], ran: dict[int, list[tuple[int, int]]]) -> bool:
    """An earlier scenario ran a group of this size whose longest prompt and longest output
    were each at least this one's: what a first run allocates and touches (a padded cache
    grown token by token in HF, pages of the heap) is in place, so a warm-up needs only the
    group's shape. Otherwise it runs whole, as vLLM's benchmark_latency warms with whole
    iterations."""
    prompt, output = group_extent(group)
    return any(p >= prompt and o >= output for p, o in ran.get(len(group), []))


def keep_longest(outputs: dict[str, list[int]], request_id: str, token_ids: list[int]) -> None:
    """Keep a request's longest greedy output: the study's prompt runs alone at each length."""
    if len(token_ids) > len(outputs.get(request_id, ())):
        outputs[request_id] = list(token_ids)


def run_scenarios(
    runner: Runner, scenarios: list[Scenario], warmup_runs: int, repeats: int, kv_bytes_per_token: int
) -> tuple[list[dict], dict]:
    """Every scenario: `warmup_runs` untimed calls on its first group, then `repeats` timed
    passes over all its groups. A warm-up is cut to WARMUP_MAX_TOKENS output tokens where an
    earlier scenario ran a group of the same size with prompts and outputs at least as long
    (covered), and runs the group whole otherwise. Returns the scenario records and the greedy
    output token ids of every request run alone (a single or the sequential scenario, the
    longest run of each), for the HF/vLLM agreement check: unbatched, so unpadded in HF."""
    records, outputs = [], {}
    ran: dict[int, list[tuple[int, int]]] = {}  # group size -> the extents of the groups timed
    for scenario in scenarios:
        record = ScenarioRecord(scenario)
        warmup = scenario.batches[0]
        if covered(warmup, ran):
            warmup = [dict(r, max_tokens=min(r["max_tokens"], WARMUP_MAX_TOKENS)) for r in warmup]
        for _ in range(warmup_runs):
            runner.run_batch(warmup)
        kv_tokens_held = None
        for repeat in tqdm(range(repeats), desc=f"{runner.name} {scenario.name}", unit="repeat"):
            results = []
            with RssSampler() as rss:
                started = CLOCK()
                for batch in scenario.batches:
                    run = runner.run_batch(batch)
                    results += run.results
                    if run.kv_tokens_held is not None:
                        kv_tokens_held = max(kv_tokens_held or 0, run.kv_tokens_held)
                    if len(batch) == 1 and repeat == 0:
                        keep_longest(outputs, batch[0]["id"], run.token_ids[0])
                duration = CLOCK() - started
            record.add_repeat(results, duration, rss.peak)
        for batch in scenario.batches:
            ran.setdefault(len(batch), []).append(group_extent(batch))
        if kv_tokens_held is not None:
            record.extra["kv_cache_tokens_held"] = kv_tokens_held
            record.extra["kv_cache_bytes_held"] = kv_tokens_held * kv_bytes_per_token
        records.append(record.to_json())
        log.info(
            "%s %s: %.1f output tok/s", runner.name, scenario.name, records[-1]["summary"]["output_throughput"]["mean"]
        )
    return records, outputs


def offline_artifact(
    *, engine: str, model: str, runner: Runner, workload: list[dict], settings: dict, kv_bytes_per_token: int
) -> dict:
    """Run the shared scenarios on one engine and assemble its artifact (provenance is added
    by the caller). `settings` holds the fair-fight settings recorded for both engines;
    `engine_report` and `timing` are what the engine itself reports and how it was timed."""
    scenarios = build_scenarios(
        workload,
        settings["study_max_new_tokens"],
        settings["batch_sizes"],
        continuous=engine == "vllm",
        workload_scenarios=settings["workload_scenarios"],
    )
    records, outputs = run_scenarios(
        runner, scenarios, settings["warmup_runs"], settings["repeats"], kv_bytes_per_token
    )
    return {
        "engine": engine,
        "model": model,
        "settings": settings,
        "engine_report": runner.engine_report(),
        "timing": runner.timing,
        "interval_scope": INTERVAL_SCOPE,
        "scenarios": records,
        "greedy_outputs": outputs,
    }


def fair_settings(
    *, dtype: str, threads: int, cpus: list[int], benchmark: dict, seed: int, prefix_caching: bool
) -> dict:
    """What both engines share, recorded in both artifacts so a reader can check it."""
    return {
        "dtype": dtype,
        "threads": threads,
        "pinned_cpus": cpus,
        "decoding": "greedy",
        "fixed_output_length": True,  # HF min_new_tokens == max_new_tokens; vLLM ignore_eos
        "warmup_runs": benchmark["warmup_runs"],
        "warmup_max_tokens": WARMUP_MAX_TOKENS,
        "repeats": benchmark["repeats"],
        "study_max_new_tokens": benchmark["study_max_new_tokens"],
        "batch_sizes": benchmark["batch_sizes"],
        "workload_scenarios": benchmark["workload_scenarios"],
        "seed": seed,
        "prefix_caching": prefix_caching,
    }
