"""SLO capacity measured on a running server: the highest concurrency (closed loop) and the
highest request rate (open loop) at which at least `attainment` of requests meet every SLO
of `load.slo_ms`, each probe a few passes of the load client after an untimed warm-up.

    attainment  = requests that succeeded within every SLO / requests sent (pooled over passes)
    its interval: 95 % Wilson score interval of that proportion
    a probe passes when the pooled attainment reaches the target; it stops early when the
    whole interval already lies below the target, or (open loop) when the server clearly falls
    behind: its queue growing, or, over a long enough pass, its achieved rate under
    SATURATED_SHARE of the rate they were sent at

The concurrency search is seeded by the KV simulator: the requests that fit the engine's
pool at once at their peak footprint (block-exact, vLLM's null block excluded). The rate search
starts at the request rate the closed loop served at its capacity (Little's law) and goes no
higher than the most requests per second any closed-loop probe completed: past the server's
throughput an open loop's queue grows without bound.
"""

from __future__ import annotations

import asyncio

from infbench.capacity.search import Probe, binding_limit, clearly_below, search, wilson_interval
from infbench.core.metrics import MS, aggregate, meets_slo
from infbench.core.stats import percentile, summarize
from infbench.engines.vllm_server import ServerError
from infbench.kv.simulator import Strategy, TraceRequest, blocks_for, static_capacity
from infbench.serving.arrivals import Arrivals, TraceArrivals, replayable, workload_trace
from infbench.serving.client import LevelRun, LoadRequest, cycle_requests, run_level, trace_requests
from infbench.serving.level_checks import open_loop_rates
from infbench.serving.sweep import Level, warmup_requests

# An open-loop pass whose server completes requests at under this share of the rate they were
# sent at is clearly saturated: its queue grows without bound, whatever the latencies so far.
# Only over a send phase many request latencies long (LONG_PASS median E2E latencies), and only
# at half: the spread of the requests' own latencies moves the completion span by a quarter
# over a pass of a few dozen requests even when the server keeps up.
SATURATED_SHARE = 0.5
LONG_PASS = 10
# Requests waiting, averaged over the second half of the send phase, above the first half's by
# at least this many: the queue keeps growing.
QUEUE_GROWTH = 1.0


def pooled_latency(results, name: str, q: float) -> float | None:
    values = [getattr(r, name) for r in results if r.success and getattr(r, name) is not None]
    return percentile([v * MS for v in values], q) if values else None


def queue_growing(run: LevelRun) -> bool:
    """Requests waiting in the server rose over the send phase (open loop)."""
    if not run.scheduled:
        return False
    end = run.scheduled[-1]
    samples = [s for s in run.metrics.samples if 0 <= s["t"] <= end and "vllm:num_requests_waiting" in s]
    if len(samples) < 4:
        return False
    half = len(samples) // 2
    first = sum(s["vllm:num_requests_waiting"] for s in samples[:half]) / half
    second = sum(s["vllm:num_requests_waiting"] for s in samples[half:]) / (len(samples) - half)
    return second - first >= QUEUE_GROWTH


def pass_record(run: LevelRun, slo_ms: dict) -> dict:
    """One pass of a probe: its attainment, throughput, latency percentiles and server state."""
    results = [s.result for s in run.results]
    summary = aggregate(results, run.duration_s)
    rates = open_loop_rates(run) or {}
    series = run.metrics
    running = [s["vllm:num_requests_running"] for s in series.samples if "vllm:num_requests_running" in s]
    preemptions = series.first_last("vllm:num_preemptions_total")
    achieved, offered = rates.get("achieved"), rates.get("offered")
    long_enough = bool(run.scheduled) and run.scheduled[-1] >= LONG_PASS * summary["median_e2el_ms"] / MS
    behind = bool(offered) and long_enough and achieved < SATURATED_SHARE * rates["sent"]
    growing = queue_growing(run)
    return {
        "requests": len(results),
        "met_slo": sum(meets_slo(r, slo_ms) for r in results),
        "failed": summary["failed"],
        "duration_s": run.duration_s,
        "output_throughput": summary["output_throughput"],
        "request_throughput": summary["request_throughput"],
        "median_ttft_ms": summary["median_ttft_ms"],
        "p99_ttft_ms": summary["p99_ttft_ms"],
        "median_tpot_ms": summary["median_tpot_ms"],
        "p99_tpot_ms": summary["p99_tpot_ms"],
        "median_itl_ms": summary["median_itl_ms"],
        "p99_e2el_ms": summary["p99_e2el_ms"],
        "offered_request_rate": offered,
        "achieved_request_rate": achieved,
        "queue_growing": growing,
        "saturated": behind or growing,
        "mean_num_requests_running": sum(running) / len(running) if running else None,
        "peak_num_requests_running": series.peak("vllm:num_requests_running"),
        "peak_num_requests_waiting": series.peak("vllm:num_requests_waiting"),
        "peak_kv_cache_usage_perc": series.peak("vllm:kv_cache_usage_perc"),
        "preemptions": preemptions[1] - preemptions[0] if series.available else None,
        # Every scrape: the binding limit is read from values that co-occurred.
        "metrics_series": series.samples,
    }


def probe_record(passes: list[dict], pooled: list, repeats: int, target: float) -> dict:
    """A probe over its passes: pooled attainment (the share of requests that completed within
    every SLO at once, failed ones missing) with its interval, pooled percentiles over the
    completed requests (among them each latency at the target's percentile, interpolated: near
    the line a single SLO would draw, not the joint rule), the throughput's mean and 95 %
    interval across passes, and the server's peaks."""
    sent = sum(p["requests"] for p in passes)
    met = sum(p["met_slo"] for p in passes)
    low, high = wilson_interval(met, sent)

    def peak(key):
        values = [p[key] for p in passes if p[key] is not None]
        return max(values) if values else None

    preemptions = [p["preemptions"] for p in passes if p["preemptions"] is not None]
    return {
        "passes": len(passes),
        "requests": sent,
        "met_slo": met,
        "attainment": met / sent if sent else 0.0,
        "attainment_ci95": [low, high],
        "output_throughput": summarize(p["output_throughput"] for p in passes).to_json(),
        "request_throughput": summarize(p["request_throughput"] for p in passes).to_json(),
        "p99_ttft_ms": pooled_latency(pooled, "ttft", 99),
        "p99_tpot_ms": pooled_latency(pooled, "tpot", 99),
        "p99_e2el_ms": pooled_latency(pooled, "e2el", 99),
        "at_target_percentile_ms": {
            metric: pooled_latency(pooled, metric, 100 * target) for metric in ("ttft", "tpot", "e2el")
        },
        "median_ttft_ms": pooled_latency(pooled, "ttft", 50),
        "median_tpot_ms": pooled_latency(pooled, "tpot", 50),
        "median_itl_ms": percentile([g * MS for r in pooled if r.success for g in r.itl], 50)
        if any(r.itl for r in pooled)
        else None,
        "saturated": any(p["saturated"] for p in passes),
        "stopped_early": len(passes) < repeats,
        "peak_num_requests_running": peak("peak_num_requests_running"),
        "peak_num_requests_waiting": peak("peak_num_requests_waiting"),
        "peak_kv_cache_usage_perc": peak("peak_kv_cache_usage_perc"),
        "preemptions": sum(preemptions) if preemptions else None,
        "pass_records": passes,
    }


def predicted_kv_concurrency(requests: list[LoadRequest], kv: dict, max_model_len: int) -> dict:
    """Requests (taken in the probe's order, cycling) that fit the pool at once, each at its
    peak footprint, prompt + max_tokens, in whole blocks; vLLM's pool lends num_blocks - 1
    blocks (one is its null block)."""
    block = kv["block_size"]
    usable = kv["num_blocks"] - 1
    trace = [TraceRequest(r.prompt_tokens, r.max_tokens) for r in requests]
    strategy = Strategy(f"paged_{block}", "paged", block_size=block)
    value = static_capacity(trace, strategy, usable * block, max_model_len)
    return {
        "value": value,
        "usable_blocks": usable,
        "block_size": block,
        "mean_blocks_per_request": sum(blocks_for(t.final, block) for t in trace) / len(trace),
        "formula": "requests admitted in order until the next one's ceil((prompt + max_tokens) / block_size) "
        "blocks no longer fit num_blocks - 1",
    }


class CapacityProbes:
    """Measures probes of one kind (closed-loop `concurrency` or open-loop `request_rate`) on
    a running server, with the capacity settings of the config."""

    def __init__(
        self, server, workload: list[dict], settings: dict, load: dict, *, seed: int, timeout_s: float, progress=print
    ):
        self.server, self.workload, self.settings, self.load = server, workload, settings, load
        self.seed, self.timeout_s, self.progress = seed, timeout_s, progress
        self.api = workload[0]["api"]
        self.sustained_concurrency = 0  # the concurrency capacity, once searched
        # A trace workload's open-loop probes replay the trace, its clock scaled to the rate.
        arrivals = workload_trace(workload)
        self.trace = TraceArrivals(arrivals) if replayable(arrivals) else None

    def arrivals_for(self, rate: float) -> Arrivals | TraceArrivals:
        """An open-loop probe's schedule at `rate` req/s: vLLM's gamma gaps, or the trace's own
        arrivals sped up by rate / the trace's rate."""
        if self.trace is not None:
            return TraceArrivals(self.trace.arrival_s, rate / self.trace.rate)
        return Arrivals(rate, self.load["burstiness"])

    def requests_for(self, mode: str, load: float) -> list[LoadRequest]:
        """A closed loop needs twice its concurrency of requests to spend most of the pass at it;
        an open loop, twice the concurrency the server sustains within the SLO (set once that
        search is done), or a high rate would send the whole pass as one burst. A trace's
        open-loop probe replays its requests, once each."""
        if mode != "concurrency" and self.trace is not None:
            return trace_requests(self.workload)
        count = self.settings["requests_per_probe"]
        if mode == "concurrency":
            count = max(count, 2 * int(load))
        else:
            count = max(count, 2 * self.sustained_concurrency)
        return cycle_requests(self.workload, count)

    def run(self, requests, concurrency, arrivals, seed) -> LevelRun:
        """One pass; a server that died during it stops the search (its failures are no measurement)."""
        run = asyncio.run(
            run_level(
                self.server.base_url,
                self.server.served_name,
                requests,
                concurrency=concurrency,
                arrivals=arrivals,
                seed=seed,
                interval_s=self.load["metrics_interval_s"],
                timeout_s=self.timeout_s,
                api=self.api,
                api_key=self.server.api_key,
                scrape_metrics=self.server.metrics,
            )
        )
        if not self.server.alive():
            failed = sum(not s.result.success for s in run.results)
            raise ServerError(
                f"the server stopped answering during the capacity search: {failed} of {len(requests)} requests "
                f"failed; its log:\n{self.server.log_tail()}"
            )
        return run

    def probe(self, mode: str, load: float) -> Probe:
        closed = mode == "concurrency"
        concurrency = int(load) if closed else None
        arrivals = None if closed else self.arrivals_for(load)
        requests = self.requests_for(mode, load)
        warm = warmup_requests(requests, Level(concurrency, arrivals, self.api))
        self.run(warm, len(warm), None, self.seed)  # untimed, outputs cut short
        target, slo_ms, repeats = self.settings["attainment"], self.load["slo_ms"], self.settings["repeats"]
        passes, pooled = [], []
        for index in range(repeats):
            run = self.run(requests, concurrency, arrivals, self.seed + index)
            record = pass_record(run, slo_ms)
            passes.append(record)
            pooled += [s.result for s in run.results]
            met, sent = sum(p["met_slo"] for p in passes), sum(p["requests"] for p in passes)
            if clearly_below(met, sent, target) or record["saturated"]:
                break
        record = probe_record(passes, pooled, repeats, target)
        record["mode"] = mode
        record["trace_scale"] = arrivals.scale if isinstance(arrivals, TraceArrivals) else None
        met = record["attainment"] >= target and not record["saturated"]
        shown = f"c={int(load)}" if closed else f"{load:.2f} req/s"
        self.progress(
            f"probe {shown}: {record['attainment'] * 100:.0f} % within the SLO "
            f"[{record['attainment_ci95'][0] * 100:.0f}, {record['attainment_ci95'][1] * 100:.0f}] over "
            f"{record['passes']} pass(es), p99 TTFT {record['p99_ttft_ms'] or 0:.0f} ms, p99 TPOT "
            f"{record['p99_tpot_ms'] or 0:.1f} ms, {record['output_throughput']['mean']:.1f} output tok/s: "
            + ("met" if met else "missed" + (" (saturated)" if record["saturated"] else ""))
        )
        return Probe(load, met, record)


def highest_completion_rate(probes: list[Probe]) -> float:
    """The most requests per second any closed-loop probe completed (mean over its passes): the
    rate search's ceiling. An open loop above the server's throughput builds a queue without
    bound, but a pass of a few dozen requests sent faster than that is one burst, served as a
    closed loop would serve it, and can meet the SLO: such rates are not probed."""
    return max((p.record["request_throughput"]["mean"] for p in probes), default=0.0)


def search_capacity(
    server,
    workload: list[dict],
    settings: dict,
    load: dict,
    kv: dict,
    *,
    max_model_len: int,
    max_num_seqs: int | None,
    seed: int,
    timeout_s: float,
    progress=print,
) -> dict:
    """The concurrency search (seeded by the KV prediction), then the rate search (seeded by
    the request rate served at the concurrency capacity, up to the highest completion rate),
    with the limit that binds each."""
    probes = CapacityProbes(server, workload, settings, load, seed=seed, timeout_s=timeout_s, progress=progress)
    # An endpoint without /metrics (kv None) has no pool to predict from: the search starts unseeded.
    predicted = predicted_kv_concurrency(probes.requests_for("concurrency", 1), kv, max_model_len) if kv else None
    kv_full_usage = 1.0
    if kv:
        largest = max(blocks_for(r["prompt_tokens"] + r["max_tokens"], kv["block_size"]) for r in workload)
        kv_full_usage = 1 - largest / (kv["num_blocks"] - 1)

    def outcome(mode: str, result) -> dict:
        by_load = {p.load: p.record for p in result.probes}
        # The limit is read where the SLO broke (the first failing probe), else at the highest probe.
        where = result.first_failing if result.first_failing is not None else max(by_load)
        record = result.to_json()
        record["binding"] = {
            "at": where,
            **binding_limit(by_load[where], kv_full_usage=kv_full_usage, max_num_seqs=max_num_seqs),
        }
        record["at_capacity"] = by_load.get(result.capacity)
        return record

    if predicted:
        progress(f"concurrency search: predicted KV-limited concurrency {predicted['value']}")
    concurrency = search(
        lambda c: probes.probe("concurrency", c),
        start=settings["start_concurrency"],
        floor=1,
        ceiling=settings["max_concurrency"],
        integer=True,
        tolerance=settings["tolerance"],
        max_probes=settings["max_probes"],
        kv_limit=predicted["value"] if predicted else None,
    )
    record = {"predicted_kv_concurrency": predicted, "concurrency": outcome("concurrency", concurrency)}
    if settings["rate"]:
        served = record["concurrency"]["at_capacity"]
        probes.sustained_concurrency = int(concurrency.capacity or 0)
        # Little's law: the closed loop at its capacity completed requests at this rate.
        start = max(served["request_throughput"]["mean"] if served else 0.0, settings["min_rate"])
        rate = search(
            lambda r: probes.probe("request_rate", r),
            start=start,
            floor=settings["min_rate"],
            ceiling=max(start, highest_completion_rate(concurrency.probes)),
            integer=False,
            tolerance=settings["tolerance"],
            max_probes=settings["max_probes"],
        )
        record["request_rate"] = outcome("request_rate", rate)
        # With a trace, a rate is the trace's own rate times a scale: the capacity as that scale.
        record["request_rate"]["trace_rate"] = probes.trace.rate if probes.trace is not None else None
    return record


def cost_per_million_output_tokens(per_hour: float | None, output_throughput: float | None) -> float | None:
    """cost per hour / (output tokens per second x 3600) x 10^6, at the SLO capacity."""
    if per_hour is None or not output_throughput:
        return None
    return per_hour / (output_throughput * 3600) * 1e6
