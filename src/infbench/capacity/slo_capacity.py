"""SLO capacity measured on a running server: the highest concurrency (closed loop) and request
rate (open loop) at which at least `attainment` of requests meet every SLO of `load.slo_ms`.
Each probe is one or more steady-state windows (`serving.window`) decided met, missed or
undecided on its attainment's 95 % Wilson interval; each search stops at capacity.max_search_s.
See docs/method.md#capacity-search, #capacity-windows, #capacity-decisions,
#capacity-curtailment and #capacity-time-budget.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import replace

from infbench.capacity.estimate import capacity_estimate, reproducibility
from infbench.capacity.search import Probe, binding_limit, interleaved, search, wilson_interval
from infbench.core.capacity_terms import LAG_GROWTH_BEHIND
from infbench.core.errors import UserError
from infbench.core.metrics import MS, aggregate, meets_slo
from infbench.core.stats import percentile, summarize
from infbench.engines.vllm_server import ServerError
from infbench.kv.simulator import Strategy, TraceRequest, blocks_for, static_capacity
from infbench.serving.arrivals import Arrivals, TraceArrivals, replayable, workload_trace
from infbench.serving.client import LoadRequest, load_request
from infbench.serving.window import RequestSupply, Window, WindowRun, run_window, saturation, window_output

# Open-loop windows last at least this many median E2E latencies (of the closed loop at its
# capacity): long enough for a queue to build where the server cannot keep up.
LONG_PASS = 10


class CapacityError(UserError):
    """A capacity search that cannot measure what it was asked to: the message names the fix."""


def pooled_latency(results, name: str, q: float) -> float | None:
    values = [getattr(r, name) for r in results if r.success and getattr(r, name) is not None]
    return percentile([v * MS for v in values], q) if values else None


def decision(met: int, counted: int, target: float, saturated: bool = False, client_behind: bool = False) -> str:
    """met / missed / undecided, by the 95 % Wilson interval of met / counted against the target;
    never met where the client fell behind its schedule (the load was not offered)."""
    low, high = wilson_interval(met, counted)
    if saturated or high < target:
        return "missed"
    return "met" if low >= target and not client_behind else "undecided"


def missed_whatever_follows(prior_met: int, prior_counted: int, planned: int, target: float, slo_ms: dict):
    """A pass's curtailment: once its window is due to count `planned` requests, the probe is
    missed (its pooled interval below the target) even if every one of them not yet seen to miss
    met the SLO. The Wilson interval's upper end rises with each request that meets, so the
    fewer requests counted when the window closes early keep the decision missed."""

    def settled(finished) -> bool:
        misses = sum(not meets_slo(r, slo_ms) for r in finished)
        return decision(prior_met + planned - misses, prior_counted + planned, target) == "missed"

    return settled


def send_lag_growth_s(run: WindowRun) -> float | None:
    """Open loop: how much later than scheduled the last tenth of the counted requests were sent
    than the first tenth (medians; at least one request each); None for a closed loop or a
    pass that counted nothing."""
    lags = run.counted_send_lags_s
    if not lags:
        return None
    tenth = max(1, len(lags) // 10)
    return statistics.median(lags[-tenth:]) - statistics.median(lags[:tenth])


def window_peak(series, in_window: list[dict], name: str) -> float | None:
    """The highest of the window's scrapes (0 if none caught it); None without /metrics."""
    if not series.available:
        return None
    return max((sample[name] for sample in in_window if name in sample), default=0.0)


def pass_record(run: WindowRun, slo_ms: dict, open_loop: bool) -> dict:
    """One windowed pass of a probe: its window, requests sent and counted, attainment over the
    counted ones, throughput over the window, latency percentiles and server state."""
    counted = [s.result for s in run.counted_results]
    window = run.window_s
    summary = aggregate(counted, window or run.ended_s)
    # Throughput is what the server delivered in the window, as at the serving levels: an
    # overloaded open loop's counted requests / window is only the rate they were sent at.
    completed, _, output_tokens = window_output(run) if window else (0, 0, 0.0)
    series = run.metrics
    in_window = run.window_samples()
    running = [s["vllm:num_requests_running"] for s in in_window if "vllm:num_requests_running" in s]
    preemptions = series.first_last("vllm:num_preemptions_total")
    sent_rate = len(counted) / window if window else None
    completed_rate = completed / window if window else None
    behind, growing = saturation(sent_rate, completed_rate, in_window) if open_loop else (False, False)
    growth = send_lag_growth_s(run) if open_loop else None
    return {
        "window_s": [run.opened_s, run.closed_s],
        "sent": run.sent,
        "requests": len(counted),
        "supply_exhausted": run.exhausted,
        "met_slo": sum(meets_slo(r, slo_ms) for r in counted),
        "settled_early": run.settled_early,
        "closed_at_deadline": run.closed_at_deadline,
        "failed": summary["failed"],
        "duration_s": run.ended_s,
        "output_throughput": output_tokens / window if window else 0.0,
        "request_throughput": completed_rate or 0.0,
        "median_ttft_ms": summary["median_ttft_ms"],
        "p99_ttft_ms": summary["p99_ttft_ms"],
        "median_tpot_ms": summary["median_tpot_ms"],
        "p99_tpot_ms": summary["p99_tpot_ms"],
        "median_itl_ms": summary["median_itl_ms"],
        "median_e2el_ms": summary["median_e2el_ms"],
        "p99_e2el_ms": summary["p99_e2el_ms"],
        "offered_request_rate": sent_rate if open_loop else None,
        "achieved_request_rate": completed_rate if open_loop else None,
        "queue_growing": growing,
        "saturated": behind or growing,
        "send_lag_growth_ms": growth * MS if growth is not None else None,
        "client_behind": growth is not None and window > 0 and growth > LAG_GROWTH_BEHIND * window,
        "mean_num_requests_running": sum(running) / len(running) if running else None,
        # Peaks in the window, as the binding limit reads it: the ramp's opening burst is not the load.
        "peak_num_requests_running": window_peak(series, in_window, "vllm:num_requests_running"),
        "peak_num_requests_waiting": window_peak(series, in_window, "vllm:num_requests_waiting"),
        "peak_kv_cache_usage_perc": window_peak(series, in_window, "vllm:kv_cache_usage_perc"),
        "preemptions": preemptions[1] - preemptions[0] if series.available else None,
        # The window's scrapes: the binding limit is read from values that co-occurred.
        "metrics_series": in_window,
    }


def probe_record(passes: list[dict], pooled: list, repeats: int, target: float, out_of_time: bool) -> dict:
    """A probe over its passes: pooled attainment over the counted requests (the share that
    completed within every SLO at once, failed ones missing) with its interval and decision,
    pooled percentiles over the completed ones (among them each latency at the target's
    percentile, interpolated: near the line a single SLO would draw, not the joint rule), the
    throughput's mean and 95 % interval across passes, and the server's peaks. `out_of_time`:
    the search's time budget cut its windows (marked where that left it undecided)."""
    counted = sum(p["requests"] for p in passes)
    met = sum(p["met_slo"] for p in passes)
    low, high = wilson_interval(met, counted)
    saturated = any(p["saturated"] for p in passes)
    # A probe missed at the load actually offered (its interval below the target, or the server
    # saturated) missed whatever the client sent; the client's lag matters only otherwise.
    missed = decision(met, counted, target, saturated) == "missed"
    client_behind = any(p.get("client_behind") for p in passes) and not missed

    def peak(key):
        values = [p[key] for p in passes if p[key] is not None]
        return max(values) if values else None

    preemptions = [p["preemptions"] for p in passes if p["preemptions"] is not None]
    return {
        "passes": len(passes),
        "requests": counted,
        "sent": sum(p["sent"] for p in passes),
        "met_slo": met,
        "attainment": met / counted if counted else 0.0,
        "attainment_ci95": [low, high],
        "decision": decision(met, counted, target, saturated, client_behind),
        "supply_exhausted": any(p["supply_exhausted"] for p in passes),
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
        "median_e2el_ms": pooled_latency(pooled, "e2el", 50),
        "median_itl_ms": percentile([g * MS for r in pooled if r.success for g in r.itl], 50)
        if any(r.itl for r in pooled)
        else None,
        "saturated": saturated,
        "client_behind": client_behind,
        "stopped_early": len(passes) < repeats,
        "out_of_time": out_of_time and decision(met, counted, target, saturated, client_behind) == "undecided",
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


def kv_limit_agreement(measured: float, requests: list[LoadRequest], kv: dict, predicted: int) -> dict:
    """Where KV memory bound the server, the most requests it ran at once (the peak of the
    binding probe's window scrapes) against bounds any server running these requests must keep,
    of U = num_blocks - 1 blocks of B tokens, L the largest request's peak footprint
    ceil((prompt + max_tokens) / B) and S the smallest prompt's ceil(prompt / B):

        at least  floor((U - L) / L)   memory bound when the cache had no room for the largest
                                       request (usage at least 1 - L / U, the binding limit's
                                       rule), and no request holds more than L blocks
        at most   floor(U / S)         no running request holds fewer blocks than its prompt
                                       fills (prompts prefilled whole, which one the step's
                                       token budget cuts short is not; no blocks shared)

    and the simulator's prediction (`predicted`, requests at their peak footprint in the
    probe's order) beside them. Outside them the pool the server ran is not the one it
    reported: fail. With prefix caching on, requests share blocks: no upper bound."""
    block, usable = kv["block_size"], kv["num_blocks"] - 1
    largest = max(blocks_for(r.prompt_tokens + r.max_tokens, block) for r in requests)
    smallest = max(1, min(blocks_for(r.prompt_tokens, block) for r in requests))
    low = max(0, (usable - largest) // largest)
    high = None if kv.get("prefix_caching") else usable // smallest
    inside = low <= measured and (high is None or measured <= high)
    shown_high = f"{high}" if high is not None else "no bound (prefix caching shares blocks)"
    return {
        "measured": measured,
        "predicted": predicted,
        "at_least": low,
        "at_most": high,
        "status": "pass" if inside else "fail",
        "detail": f"at most {measured:.0f} requests ran at once where KV memory bound (the simulator predicted "
        f"{predicted}); with {usable} blocks of {block} tokens, the largest request {largest} blocks at its peak and "
        f"the smallest prompt {smallest}, any server holds between {low} and {shown_high}"
        + ("" if inside else ": outside, the pool the server ran is not the one it reported"),
    }


class CapacityProbes:
    """Measures probes of one kind (closed-loop `concurrency` or open-loop `request_rate`) on
    a running server, with the capacity settings of the config, every probe drawing distinct
    requests from `pool` (request_pool.jsonl) in a seeded order."""

    def __init__(
        self,
        server,
        workload: list[dict],
        pool: list[dict],
        settings: dict,
        load: dict,
        *,
        seed: int,
        timeout_s: float,
        progress=print,
    ):
        self.server, self.workload, self.settings, self.load = server, workload, settings, load
        self.seed, self.timeout_s, self.progress = seed, timeout_s, progress
        self.api = workload[0]["api"]
        self.supply = RequestSupply(pool, load_request, seed)
        self.window = Window(settings["window_s"], settings["window_requests"])
        self.deadline: float | None = None  # perf_counter: the search's capacity.max_search_s runs out
        # A trace workload's open-loop probes replay the trace, its clock scaled to the rate.
        arrivals = workload_trace(workload)
        self.trace = TraceArrivals(arrivals) if replayable(arrivals) else None
        self.trace_rows = [r for r in workload if r.get("kind") == "trace"]

    def arrivals_for(self, rate: float) -> Arrivals | TraceArrivals:
        """An open-loop probe's schedule at `rate` req/s: vLLM's gamma gaps, or the trace's own
        arrivals sped up by rate / the trace's rate."""
        if self.trace is not None:
            return TraceArrivals(self.trace.arrival_s, rate / self.trace.rate)
        return Arrivals(rate, self.load["burstiness"])

    def run(self, requests, window: Window, concurrency, arrivals, seed) -> WindowRun:
        """One windowed pass; a server that died during it stops the search (its failures are no measurement)."""
        run = asyncio.run(
            run_window(
                self.server.base_url,
                self.server.served_name,
                requests,
                window=window,
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
                f"the server stopped answering during the capacity search: {failed} of {len(run.results)} requests "
                f"failed; its log:\n{self.server.log_tail()}"
            )
        return run

    def probe(self, mode: str, load: float, window: Window | None = None) -> Probe:
        """Windowed passes at one load until the attainment interval decides it (met or
        missed) or capacity.repeats passes were run; every pass draws on the probe's one run of
        distinct requests (a trace: its requests, replayed once a pass)."""
        closed = mode == "concurrency"
        concurrency = int(load) if closed else None
        arrivals = None if closed else self.arrivals_for(load)
        window = window or self.window
        replay = not closed and self.trace is not None
        supply = None if replay else self.supply.take()
        target, slo_ms, repeats = self.settings["attainment"], self.load["slo_ms"], self.settings["repeats"]
        passes, pooled = [], []
        met = counted = 0  # pooled over the passes so far
        out_of_time = False
        for index in range(repeats):
            if index and self.out_of_time():
                out_of_time = True
                break
            requests = iter([load_request(r, index) for r in self.trace_rows]) if replay else supply
            settled = missed_whatever_follows(met, counted, window.min_requests, target, slo_ms)
            timed = replace(window, settled=settled, deadline=self.deadline)
            run = self.run(requests, timed, concurrency, arrivals, self.seed + index)
            out_of_time |= run.closed_at_deadline
            if not run.counted_results and not replay:
                raise CapacityError(
                    f"the request pool ran out before the window of probe {mode} {load:g} counted a request "
                    f"({run.sent} sent, {len(self.supply.rows)} distinct requests in this search's share of "
                    "request_pool.jsonl): raise "
                    "workload.pool_requests (a dataset: use a larger one), or lower capacity.max_concurrency"
                )
            record = pass_record(run, slo_ms, open_loop=not closed)
            passes.append(record)
            pooled += [s.result for s in run.counted_results]
            met, counted = sum(p["met_slo"] for p in passes), sum(p["requests"] for p in passes)
            # A trace replay ends with the trace: its passes pool until decided, as others do.
            # A pass whose client fell behind can never make the probe met: no more passes.
            behind = any(p["client_behind"] for p in passes)
            if (
                behind
                or decision(met, counted, target, record["saturated"]) != "undecided"
                or (record["supply_exhausted"] and not replay)
            ):
                break
        record = probe_record(passes, pooled, repeats, target, out_of_time)
        record["mode"] = mode
        record["trace_scale"] = arrivals.scale if isinstance(arrivals, TraceArrivals) else None
        record["window"] = {"seconds": window.seconds, "min_requests": window.min_requests}
        record["trace_replay"] = replay
        if replay:
            record["supply_exhausted"] = False  # the trace's end closes each pass
        verdict = record["decision"]
        # Undecided, a probe steers the search by its share, except where the client fell behind:
        # a load it did not offer is no evidence that the server met it.
        met = verdict == "met" or (
            verdict == "undecided" and record["attainment"] >= target and not record["client_behind"]
        )
        shown = f"c={int(load)}" if closed else f"{load:.2f} req/s"
        low, high = record["attainment_ci95"]
        self.progress(
            f"probe {shown}: {record['attainment'] * 100:.0f} % of {record['requests']} counted requests "
            f"({record['sent']} sent) within the SLO [{low * 100:.0f}, {high * 100:.0f}] over {record['passes']} "
            f"window(s) of {window.seconds:g} s, p99 TTFT {record['p99_ttft_ms'] or 0:.0f} ms, p99 TPOT "
            f"{record['p99_tpot_ms'] or 0:.1f} ms, {record['output_throughput']['mean']:.1f} output tok/s: {verdict}"
            + (" (saturated)" if record["saturated"] else "")
            + (
                " (the client fell behind its schedule: this rate was not offered)"
                if record["client_behind"]
                else f", so {'met' if met else 'missed'} by its point estimate"
                if verdict == "undecided"
                else ""
            )
            + (" (the request pool ran out: raise workload.pool_requests)" if record["supply_exhausted"] else "")
            + (" (its window ended once missed)" if any(p["settled_early"] for p in passes) else "")
            + (" (capacity.max_search_s ran out: no more windows)" if record["out_of_time"] else "")
        )
        return Probe(load, met, record, decided=verdict != "undecided", client_behind=record["client_behind"])

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline


def highest_completion_rate(probes: list[Probe]) -> float:
    """The most requests per second any closed-loop probe completed in its windows (mean over
    its passes): the rate search's ceiling. Past the server's throughput an open loop builds
    a queue without bound, so such rates are not probed."""
    return max((p.record["request_throughput"]["mean"] for p in probes), default=0.0)


def rate_window(settings: dict, concurrency_record: dict) -> Window:
    """The rate search's window: at least LONG_PASS median E2E latencies of the closed loop at
    its capacity (at its lowest probe where none met), and at least capacity.window_s."""
    probes = concurrency_record["probes"]
    at = concurrency_record["at_capacity"] or min(probes, key=lambda p: p["load"])
    latency_s = (at.get("median_e2el_ms") or 0.0) / MS
    return Window(max(settings["window_s"], LONG_PASS * latency_s), settings["window_requests"])


def fitted_capacity(probes: list[Probe], target: float, mode: str, seed: int) -> dict:
    """The capacity estimate (capacity.estimate) over a search's probes. A saturated probe's
    requests met the SLO only on their way into a queue without bound: none counts. A probe
    whose client fell behind was not offered its load: it is left out."""
    return capacity_estimate(
        [
            (p.load, 0 if p.record["saturated"] else p.record["met_slo"], p.record["requests"])
            for p in probes
            if not p.client_behind
        ],
        target,
        integer=mode == "concurrency",
        seed=seed,
    )


def pool_share(pool: list[dict], index: int, count: int) -> list[dict]:
    """Search `index` of `count`'s requests: every count-th row from the index-th, so that the
    searches' shares are disjoint and together the whole pool."""
    return pool[index::count]


def search_capacity(
    server,
    workload: list[dict],
    pool: list[dict],
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
    """The concurrency search (seeded by the KV prediction; with capacity.searches > 1, that many
    independent searches taking turns, each on its own share of the pool, and whether their
    capacities agree), then the rate search (seeded by the request rate served at the
    concurrency capacity, up to the highest completion rate), each with its capacity estimate
    and interval and the limit that binds it."""
    count = settings["searches"]
    # capacity.searches > 1: independent searches, each on its own share of the pool, interleaved.
    searchers = [
        CapacityProbes(
            server,
            workload,
            pool_share(pool, index, count),
            settings,
            load,
            seed=seed + index,
            timeout_s=timeout_s,
            progress=(lambda line, n=index: progress(f"search {n + 1}/{count}: {line}")) if count > 1 else progress,
        )
        for index in range(count)
    ]
    probes = searchers[0]
    # An endpoint without /metrics (kv None) has no pool to predict from: the search starts unseeded.
    # The prediction in the order the first search draws its rows; the KV classification and
    # the KV-limit bounds over the whole pool, which every search draws from.
    drawn = [load_request(r, 0) for r in probes.supply.rows]
    predicted = predicted_kv_concurrency(drawn, kv, max_model_len) if kv else None
    pool_requests = [load_request(r, 0) for r in pool]
    kv_full_usage = 1.0
    if kv:
        largest = max(blocks_for(r["prompt_tokens"] + r["max_tokens"], kv["block_size"]) for r in pool)
        kv_full_usage = 1 - largest / (kv["num_blocks"] - 1)

    def outcome(mode: str, result, seconds: float) -> dict:
        by_load = {p.load: p.record for p in result.probes}
        # The limit is read where the SLO broke (the first failing probe), else at the highest probe.
        where = result.first_failing if result.first_failing is not None else max(by_load)
        record = result.to_json()
        record["search_s"] = seconds
        record["max_search_s"] = settings["max_search_s"]
        if by_load[where].get("client_behind"):
            limit = {
                "limit": "client",
                "evidence": "the client fell behind its schedule here: the server was never offered this load",
            }
        else:
            limit = binding_limit(by_load[where], kv_full_usage=kv_full_usage, max_num_seqs=max_num_seqs)
        record["binding"] = {"at": where, **limit}
        record["kv_limit"] = (
            kv_limit_agreement(by_load[where]["peak_num_requests_running"], pool_requests, kv, predicted["value"])
            if mode == "concurrency" and predicted and limit["limit"] == "kv_memory"
            else None
        )
        record["at_capacity"] = by_load.get(result.capacity)
        record["estimate"] = fitted_capacity(result.probes, settings["attainment"], mode, seed)
        return record

    if predicted:
        progress(f"concurrency search: predicted KV-limited concurrency {predicted['value']}")
    # The searches that take turns share one time budget, as they share the server.
    started = time.perf_counter()
    for searcher in searchers:
        searcher.deadline = started + settings["max_search_s"]
    concurrency, *others = interleaved(
        [lambda c, searcher=searcher: searcher.probe("concurrency", c) for searcher in searchers],
        start=settings["start_concurrency"],
        floor=1,
        ceiling=settings["max_concurrency"],
        integer=True,
        tolerance=settings["tolerance"],
        max_probes=settings["max_probes"],
        kv_limit=predicted["value"] if predicted else None,
        out_of_time=probes.out_of_time,
    )
    seconds = time.perf_counter() - started
    record = {"predicted_kv_concurrency": predicted, "concurrency": outcome("concurrency", concurrency, seconds)}
    if others:
        record["concurrency_searches"] = [outcome("concurrency", other, seconds) for other in others]
        record["reproducibility"] = reproducibility(
            [record["concurrency"]["estimate"], *(other["estimate"] for other in record["concurrency_searches"])]
        )
    if settings["rate"]:
        served = record["concurrency"]["at_capacity"]
        window = rate_window(settings, record["concurrency"])
        progress(f"rate search: windows of {window.seconds:.1f} s (at least {LONG_PASS} median latencies)")
        # Little's law: the closed loop at its capacity completed requests at this rate.
        start = max(served["request_throughput"]["mean"] if served else 0.0, settings["min_rate"])
        started = time.perf_counter()
        probes.deadline = started + settings["max_search_s"]
        rate = search(
            lambda r: probes.probe("request_rate", r, window),
            start=start,
            floor=settings["min_rate"],
            ceiling=max(start, highest_completion_rate(concurrency.probes)),
            integer=False,
            tolerance=settings["tolerance"],
            max_probes=settings["max_probes"],
            out_of_time=probes.out_of_time,
        )
        record["request_rate"] = outcome("request_rate", rate, time.perf_counter() - started)
        # With a trace, a rate is the trace's own rate times a scale: the capacity as that scale.
        record["request_rate"]["trace_rate"] = probes.trace.rate if probes.trace is not None else None
    return record


def cost_per_million_output_tokens(per_hour: float | None, output_throughput: float | None) -> float | None:
    """cost per hour / (output tokens per second x 3600) x 10^6, at the SLO capacity."""
    if per_hour is None or not output_throughput:
        return None
    return per_hour / (output_throughput * 3600) * 1e6
