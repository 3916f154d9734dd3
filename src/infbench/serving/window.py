"""A pass measured in a steady-state window: a ramp until as many requests have completed as
the pass keeps in flight, a window of `seconds` and `min_requests` (closed early where
`settled` or past a `deadline`), a hold until the counted requests finish; `measure_pass`, the
one windowed pass of the serving levels and the capacity probes. See
docs/method.md#steady-state-windows, #capacity-curtailment and #capacity-time-budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from infbench.core.errors import UserError
from infbench.core.metrics import RequestResult
from infbench.engines.server_metrics import MetricsScraper, MetricsSeries
from infbench.engines.vllm_server import ServerError, empty_prefix_cache
from infbench.serving.arrivals import Arrivals, TraceArrivals
from infbench.serving.client import (
    LevelRun,
    LoadRequest,
    LoopWatch,
    PassWindow,
    StreamedResult,
    client_cpu,
    cpu_since,
    pass_client,
    stream_request,
)
from infbench.serving.sessions import SessionPlan, sessions_open_loop, users_loop


@dataclass(frozen=True)
class Window:
    seconds: float
    min_requests: int = 0
    # Given the counted requests' results that finished, whether the window's outcome at
    # min_requests is already fixed (docs/method.md#capacity-curtailment); None: never.
    settled: Callable[[list], bool] | None = None
    # perf_counter time past which the window, its seconds up, closes without waiting for
    # min_requests (docs/method.md#capacity-time-budget); None: no deadline.
    deadline: float | None = None


@dataclass
class WindowRun:
    results: list[StreamedResult]  # every request that finished, in send order
    counted: list[bool]  # per result: sent while the window was open
    opened_s: float | None  # from the pass's start; None: the ramp never ended
    closed_s: float | None
    ended_s: float  # the pass's end: the last counted request finished (or sending stopped)
    metrics: MetricsSeries
    started: float  # perf_counter at the pass's start
    exhausted: bool  # the supply (or schedule) ran out before the last counted request finished (cut short)
    sent: int  # every request sent, those cancelled when the pass ended included
    # Open loop: each counted request's send lag (when the client got to it less when it was
    # scheduled, seconds; a wait for a free slot is not in it), in send order.
    counted_send_lags_s: list[float] | None = None
    client_cpu_s: float = 0.0  # every client process's CPU seconds over the pass, summed
    processes: int = 1  # client processes: over one, ClientPool workers streamed the requests
    process_cpu_s: list[float] | None = None  # each worker's CPU seconds, then this process's (None: one)
    settled_early: bool = False  # the window closed before min_requests: its outcome was fixed
    closed_at_deadline: bool = False  # the window closed early at Window.deadline
    cancelled: list[dict] = field(default_factory=list)  # cancelled_record of each request cut off at the end
    turns: list | None = None  # users in sessions: each result's sessions.TurnLog
    # The client's event loop, the one that timestamps every stream, at its latest between the
    # window's opening and the pass's end: how much later than asked a LOOP_TICK_S sleep woke
    # (docs/method.md#client-limited-probes). Late by a stall, every timestamp taken in it is.
    loop_late_s: float = 0.0

    @property
    def counted_results(self) -> list[StreamedResult]:
        return [r for r, counted in zip(self.results, self.counted) if counted]

    @property
    def window_s(self) -> float:
        return (self.closed_s - self.opened_s) if self.opened_s is not None and self.closed_s is not None else 0.0

    def window_samples(self) -> list[dict]:
        """The server's /metrics scrapes taken while the window was open."""
        if not self.window_s:
            return []
        return [s for s in self.metrics.samples if self.opened_s <= s["t"] <= self.closed_s]


# The saturation rule, shared by the serving levels' check and the capacity search. An
# open-loop pass whose server completed requests during the window at under this share of the
# rate they were sent at is clearly saturated: its queue grows without bound.
SATURATED_SHARE = 0.5
# Requests waiting, averaged over the second half of the window's scrapes, above the first
# half's by at least this many: the queue keeps growing.
QUEUE_GROWTH = 1.0


def saturation(sent_rate: float | None, completed_rate: float | None, samples: list[dict]) -> tuple[bool, bool]:
    """An open-loop pass's two signs of saturation: (behind, growing). Behind: completions under
    SATURATED_SHARE of the rate sent (no rate sent: not behind); growing: queue_growing over
    `samples`, the window's /metrics scrapes."""
    behind = bool(sent_rate) and completed_rate < SATURATED_SHARE * sent_rate
    return behind, queue_growing(samples)


def queue_growing(samples: list[dict]) -> bool:
    """Requests waiting in the server rose over these /metrics scrapes (at least 4)."""
    samples = [s for s in samples if "vllm:num_requests_waiting" in s]
    if len(samples) < 4:
        return False
    half = len(samples) // 2
    first = sum(s["vllm:num_requests_waiting"] for s in samples[:half]) / half
    second = sum(s["vllm:num_requests_waiting"] for s in samples[half:]) / (len(samples) - half)
    return second - first >= QUEUE_GROWTH


class _Pass:
    """The bookkeeping of one pass: what was sent, when the window opened and closed, and the
    counted requests still in flight."""

    def __init__(self, window: Window, ramp: int, started: float, watch: LoopWatch):
        self.window, self.ramp, self.started, self.watch = window, ramp, started, watch
        self.sent = 0
        self.results: dict[int, StreamedResult] = {}
        self.in_flight: dict[int, tuple[LoadRequest, float, float | None]] = {}  # request, sent_at, scheduled_s
        self.counted: set[int] = set()
        self.send_lag: dict[int, float] = {}  # open loop: by send index
        self.in_flight_counted = 0
        self.opened = self.closed = None
        self.exhausted = False
        self.cut_short = False  # the supply or schedule ran out before the window was whole
        self.settled_early = False
        self.closed_at_deadline = False
        self.done = asyncio.Event()
        self.error: Exception | None = None  # a client worker that stopped (ClientPool.on_stop)

    def fail(self, error: Exception) -> None:
        self.error = error
        self.done.set()

    def loop_late_s(self, ended: float) -> float:
        """The client's event loop at its latest from the window's opening to `ended`."""
        if self.opened is None:
            return 0.0
        return self.watch.latest(self.started + self.opened, self.started + ended)

    def now(self) -> float:
        return time.perf_counter() - self.started

    def open_now(self) -> bool:
        """Whether a request sent now is counted; closes the window when its time and its
        request count are both reached."""
        if self.opened is None or self.closed is not None:
            return False
        if self.now() - self.opened < self.window.seconds:
            return True
        if len(self.counted) >= self.window.min_requests:
            self.closed = self.now()
            return False
        deadline = self.window.deadline
        if deadline is not None and self.counted and time.perf_counter() >= deadline:
            self.closed = self.now()
            self.closed_at_deadline = True
            return False
        return True

    def sending(self) -> bool:
        return not self.done.is_set()

    async def pause(self, seconds: float) -> bool:
        """Waits `seconds` (a user's think time), cut short where the pass ends first, so that a
        drain waits only for turns in flight; whether the pass is still sending."""
        if seconds > 0 and self.sending():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), seconds)
        else:
            await asyncio.sleep(0)
        return self.sending()

    def finish(self) -> None:
        """A whole pass of sessions: every conversation has ended, and the window with the pass."""
        self.exhausted = True
        self.closed = self.now()
        self.done.set()

    def open_window(self) -> None:
        """Sessions on a schedule: the ramp's time is up (its count is then never reached)."""
        if self.opened is None and not self.exhausted:
            self.opened = self.now()

    def on_send(self, request: LoadRequest, scheduled_s: float | None = None) -> int | None:
        """A request is about to be sent: its index in the pass, counted if the window is open;
        None where the window closing now ended the pass, so that it is not sent."""
        counted = self.open_now()
        if not counted and self.closed is not None:
            self.check_done()  # it closed now: the pass may be over
            if self.done.is_set():
                return None
        index = self.sent
        self.sent += 1
        self.in_flight[index] = (request, time.perf_counter(), scheduled_s)
        if counted:
            self.counted.add(index)
            self.in_flight_counted += 1
        return index

    def on_finish(self, index: int, streamed: StreamedResult) -> None:
        self.results[index] = streamed
        del self.in_flight[index]
        if len(self.results) == self.ramp and self.opened is None and not self.exhausted:
            self.opened = self.now()
        if index in self.counted:
            self.in_flight_counted -= 1
            self.settle()
        self.check_done()

    def settle(self) -> None:
        """Past its seconds, the window closes at min_requests counted: it closes now where the
        counted requests finished so far fix its outcome whatever the others would do."""
        settled = self.window.settled
        if settled is None or self.opened is None or self.closed is not None:
            return
        if self.now() - self.opened < self.window.seconds or len(self.counted) >= self.window.min_requests:
            return
        if settled([self.results[i].result for i in sorted(self.counted) if i in self.results]):
            self.closed = self.now()
            self.settled_early = True

    def stop_sending(self) -> None:
        """The supply ran dry: nothing more is sent; the window closes now if it was open."""
        self.exhausted = True
        # Short while the window was open or before it, or during the hold: counted requests
        # still running see the load fall as slots go unfilled.
        if self.closed is None or self.in_flight_counted:
            self.cut_short = True
        if self.closed is None and self.opened is not None:
            self.closed = self.now()
        self.check_done()

    def check_done(self) -> None:
        if self.in_flight_counted:
            return
        if self.closed is not None or (self.exhausted and len(self.results) == self.sent):
            self.done.set()
        elif self.opened is not None:
            self.open_now()  # the window may be due to close with nothing counted in flight
            if self.closed is not None:
                self.done.set()


async def closed_loop(client, model: str, supply: Iterator[LoadRequest], concurrency: int, state: _Pass, api: str):
    """`concurrency` slots, each sending the supply's next request as soon as its last finished."""

    async def slot():
        while state.sending():
            request = next(supply, None)
            if request is None:
                state.stop_sending()
                return
            index = state.on_send(request)
            if index is None:
                return
            state.on_finish(index, await stream_request(client, model, request, api))

    tasks = [asyncio.ensure_future(slot()) for _ in range(concurrency)]
    await state.done.wait()
    return tasks


async def open_loop(
    client, model: str, supply: Iterator[LoadRequest], offsets: list[float], state: _Pass, api: str, cap: int | None
):
    """Requests sent at `started` + each offset, at most `cap` in flight where it is given
    (vLLM's --max-concurrency: a request whose time came waits for a free slot), until the pass
    is done. A request is drawn from the supply, and counted if the window is open, when it is
    sent, not when its time came, so that a queue in the client does not use up the supply."""
    tasks = []
    gate = asyncio.Semaphore(cap) if cap is not None else contextlib.nullcontext()

    async def send(offset):
        ready = time.perf_counter()
        async with gate:
            if not state.sending():
                return
            request = next(supply, None)
            if request is None:
                state.stop_sending()
                return
            index = state.on_send(request, offset)
            if index is None:
                return
            state.send_lag[index] = ready - (state.started + offset)  # the client late to its schedule
            streamed = await stream_request(client, model, request, api)
        streamed.ready_at, streamed.scheduled_s = ready, offset
        state.on_finish(index, streamed)

    async def dispatch():
        for offset in offsets:
            await asyncio.sleep(max(0.0, state.started + offset - time.perf_counter()))
            if not state.sending():
                return
            tasks.append(asyncio.ensure_future(send(offset)))
        state.stop_sending()  # the schedule ran out

    dispatcher = asyncio.ensure_future(dispatch())
    await state.done.wait()
    dispatcher.cancel()  # nothing more is sent: no wait for its sleep to the next send time
    return [dispatcher, *tasks]


def open_loop_offsets(arrivals: Arrivals | TraceArrivals, window: Window, seed: int, hold_s: float) -> list[float]:
    """Enough send offsets for a ramp and a hold of `hold_s` each around the window, at the
    arrivals' rate, vLLM's gamma gaps over that many requests; a trace's own arrivals, scaled."""
    if isinstance(arrivals, TraceArrivals):
        return arrivals.offsets(len(arrivals.arrival_s), seed)
    count = window.min_requests + math.ceil(arrivals.rate * (window.seconds + 2 * hold_s)) + 1
    return arrivals.offsets(count, seed)


async def run_window(
    base_url: str,
    model: str,
    supply: Iterator[LoadRequest],
    *,
    window: Window,
    concurrency: int | None,
    arrivals: Arrivals | TraceArrivals | None,
    seed: int,
    interval_s: float,
    timeout_s: float,
    api: str = "completions",
    api_key: str | None = None,
    scrape_metrics: bool = True,
    drain: bool = False,
    users: SessionPlan | None = None,
    whole_sessions: int | None = None,
    processes: int = 1,
) -> WindowRun:
    """One windowed pass: closed loop (`arrivals` None: `concurrency`
    in flight, or with `users` that many users in chat sessions, `supply` unused) or open loop
    (requests sent on `arrivals`, at most `concurrency` in flight where it is given, the ramp
    then lasting as many completions; with `users`, a chat session starting at each arrival,
    the ramp lasting users.ramp_s; with `whole_sessions`, that many sessions on `arrivals`
    and every turn counted, the pass ending when the last conversation has: `window` unused).
    A request is held to `timeout_s`, so the
    hold after the window ends within it. Once the last counted request has finished,
    nothing more is sent, and what is in flight is cancelled, or with `drain` left to finish
    (uncounted), so that every request the server timed is among the results. With `processes`
    over one, the requests are streamed by that many client worker processes (ClientPool)."""
    if concurrency is None and arrivals is None:
        raise ValueError("a windowed pass is closed loop (concurrency) or open loop (arrivals)")
    if whole_sessions is not None:
        offsets, window = arrivals.offsets(whole_sessions, seed), Window(math.inf)  # never closes by time
    else:
        offsets = [] if arrivals is None else open_loop_offsets(arrivals, window, seed, timeout_s)
    sessions_on_schedule = users is not None and arrivals is not None
    watch = LoopWatch()
    async with pass_client(processes, base_url, timeout_s, api_key, watch) as sender:
        with MetricsScraper(base_url, interval_s, enabled=scrape_metrics) as scraper:
            started = time.perf_counter()
            cpu_started = client_cpu(sender)
            # Sessions on a schedule: the window opens at a time (SessionPlan.ramp_s), not at a count.
            state = _Pass(window, math.inf if sessions_on_schedule else concurrency or 1, started, watch)
            if processes > 1:
                sender.on_stop = state.fail
            watcher = asyncio.ensure_future(watch.run())
            logs = None
            if sessions_on_schedule:
                tasks, logs = await sessions_open_loop(
                    sender, model, users, offsets, state, seed, whole=whole_sessions is not None
                )
            elif users is not None:
                tasks, logs = await users_loop(sender, model, users, concurrency, state, seed)
            elif arrivals is None:
                tasks = await closed_loop(sender, model, supply, concurrency, state, api)
            else:
                tasks = await open_loop(sender, model, supply, offsets, state, api, concurrency)
            ended = state.now()
            process_cpu_s = [] if state.error else cpu_since(cpu_started, sender)  # a stopped worker has no CPU
            watcher.cancel()
            if not drain or state.error:
                for task in tasks:
                    task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)
            if state.error:
                raise state.error
    finished = sorted(state.results)  # cancelled requests never finished: they are not results
    return WindowRun(
        results=[state.results[i] for i in finished],
        counted=[i in state.counted for i in finished],
        opened_s=state.opened,
        closed_s=state.closed,
        ended_s=ended,
        metrics=scraper.series(started),
        started=started,
        exhausted=state.cut_short,
        sent=state.sent,
        # Sessions on a schedule: the lags of the counted sessions' first turns (later turns follow replies).
        counted_send_lags_s=[state.send_lag[i] for i in sorted(state.counted) if i in state.send_lag]
        if offsets
        else None,
        client_cpu_s=sum(process_cpu_s),
        processes=processes,
        process_cpu_s=process_cpu_s if processes > 1 else None,
        settled_early=state.settled_early,
        closed_at_deadline=state.closed_at_deadline,
        cancelled=[
            {**cancelled_record(*state.in_flight[i], started), **(logs[i].to_json() if logs is not None else {})}
            for i in sorted(state.in_flight)
        ],
        turns=[logs[i] for i in finished] if logs is not None else None,
        loop_late_s=state.loop_late_s(ended),
    )


def streamed_record(streamed: StreamedResult, started: float) -> dict:
    """One request as the client saw it: vLLM's fields, its max_tokens, when it was sent from its
    pass's start (`started`, perf_counter), and, open loop, when it was scheduled and where its
    time before it reached the server went:

    send lag      = ready - scheduled   (the client late to its own schedule: a busy event loop)
    client queue  = sent - ready        (waiting for a free slot under max_concurrency; vLLM's
                                         client_queue_time; spread over client processes,
                                         the hand-over to a worker too)
    """
    record = {**streamed.result.to_json(), "max_tokens": streamed.max_tokens, "sent_s": streamed.sent_at - started}
    if streamed.scheduled_s is not None:
        record.update(
            scheduled_s=streamed.scheduled_s,
            send_lag_s=streamed.ready_at - (started + streamed.scheduled_s),
            client_queue_s=streamed.sent_at - streamed.ready_at,
        )
    return record


def cancelled_record(request: LoadRequest, sent_at: float, scheduled_s: float | None, started: float) -> dict:
    """A request still in flight when its pass ended, cancelled by the client: sent outside the
    window (in the ramp or the hold: a counted request is always waited for), so never counted;
    recorded as a failure with no tokens, so that a pass's requests are all accounted for."""
    error = "cancelled: still in flight when the pass ended (sent outside its window, never counted)"
    result = RequestResult(request.id, request.prompt_tokens, 0, 0.0, 0.0, [], success=False, error=error)
    record = {**result.to_json(), "max_tokens": request.max_tokens, "sent_s": sent_at - started}
    return record if scheduled_s is None else {**record, "scheduled_s": scheduled_s}


def window_output(run: WindowRun) -> tuple[int, int, float]:
    """What the server delivered while the window was open, from every request of the pass
    (counted or not): the requests that completed in it, their prompt tokens, and the output
    tokens that arrived in it (a request's `usage` tokens spread evenly over its chunks, each
    chunk at its arrival: sent + TTFT, then each ITL gap)."""
    start, end = run.started + run.opened_s, run.started + run.closed_s
    completed = prompt_tokens = 0
    tokens = 0.0
    for streamed in run.results:
        result = streamed.result
        if not result.success:
            continue
        if start <= streamed.sent_at + result.e2el < end:
            completed += 1
            prompt_tokens += result.prompt_tokens
        chunks = list(itertools.accumulate(result.itl, initial=streamed.sent_at + result.ttft))
        tokens += sum(start <= t < end for t in chunks) * result.output_tokens / len(chunks)
    return completed, prompt_tokens, tokens


class PoolRanDry(UserError):
    """A windowed pass whose request pool ran out before its window counted a request."""


def send_lag_growth_s(run: WindowRun) -> float | None:
    """Open loop: the median send lag of the last tenth of the counted requests less the first
    tenth's (at least one each); None for a closed loop or a pass that counted nothing."""
    lags = run.counted_send_lags_s
    if not lags:
        return None
    tenth = max(1, len(lags) // 10)
    return statistics.median(lags[-tenth:]) - statistics.median(lags[:tenth])


@dataclass
class MeasuredPass:
    """A windowed pass as the serving levels and the capacity probes read it: the run, what the
    server delivered in its window (`window_output`) and, open loop, its two signs of
    saturation (`saturation`) and its send lag's growth (`send_lag_growth_s`)."""

    run: WindowRun
    open_loop: bool
    completed: int
    prompt_tokens: int
    output_tokens: float
    behind: bool = False
    growing: bool = False
    send_lag_growth_s: float | None = None

    @classmethod
    def of(cls, run: WindowRun, open_loop: bool) -> MeasuredPass:
        seconds = run.window_s
        delivered = window_output(run) if seconds else (0, 0, 0.0)
        if not open_loop:
            return cls(run, False, *delivered)
        sent_and_completed = (len(run.counted_results) / seconds, delivered[0] / seconds) if seconds else (None, None)
        behind, growing = saturation(*sent_and_completed, run.window_samples())
        return cls(run, True, *delivered, behind, growing, send_lag_growth_s(run))

    @property
    def counted(self) -> list[RequestResult]:
        return [s.result for s in self.run.counted_results]


def ensure_alive(server, what: str, results: list[StreamedResult]) -> None:
    """A server that died during a pass stops the stage: its failures are no measurement."""
    if not server.alive():
        failed = sum(not s.result.success for s in results)
        raise ServerError(
            f"the server stopped answering during {what}: {failed} of {len(results)} finished requests failed; "
            f"its log:\n{server.log_tail()}"
        )


def measure_pass(
    server, supply: Iterator[LoadRequest], *, what: str, pool: str | None, fix: str, **how
) -> MeasuredPass:
    """`run_window` on `server` (`how`: its window, load, seed, interval, timeout, API, drain).
    Raises ServerError where the server is not alive after it, and PoolRanDry where it counted
    nothing from `pool` (the distinct requests it drew from; None: a replay ends with its
    trace). `what` names the pass and `fix` the other remedy in those messages. Where the server
    caches prefixes, the cache is emptied first: no pass is flattered by an earlier one's prompts."""
    empty_prefix_cache(server)
    run = asyncio.run(
        run_window(server.base_url, server.served_name, supply, api_key=server.api_key,
                   scrape_metrics=server.metrics, **how)
    )  # fmt: skip
    ensure_alive(server, what, run.results)
    if not run.counted_results and pool is not None:
        raise PoolRanDry(
            f"the request pool ran out before the window of {what} counted a request ({run.sent} sent, {pool}): "
            f"raise workload.pool_requests (a dataset: use a larger one), or {fix}"
        )
    return MeasuredPass.of(run, open_loop=how["arrivals"] is not None)


def window_processes(load: dict) -> int:
    """The client processes of a windowed pass: load.client_processes where it is a number;
    auto: one (a windowed pass's rates are what it measures, so no calibration can size it
    beforehand). See docs/method.md#serving-metrics-arrivals-repeats-the-client."""
    processes = load.get("client_processes", "auto")
    return 1 if processes == "auto" else processes


def level_run(measured: MeasuredPass) -> LevelRun:
    """A windowed pass as a serving level's pass: its counted requests over its window, the
    client's CPU seconds at the pass's own rate over the window, the whole pass in `window`."""
    run = measured.run
    counted = run.counted_results
    in_window = run.window_s / run.ended_s if run.ended_s else 0.0
    return LevelRun(
        results=counted,
        duration_s=run.window_s,
        metrics=run.metrics,
        client_cpu_s=run.client_cpu_s * in_window,
        processes=run.processes,
        process_cpu_s=[cpu_s * in_window for cpu_s in run.process_cpu_s] if run.process_cpu_s else None,
        # Sessions keep their starts' lags, not a request schedule: only a session's first turn has a time.
        scheduled=[s.scheduled_s for s in counted] if run.counted_send_lags_s is not None and run.turns is None else [],
        started=run.started,
        window=PassWindow(
            run.opened_s, run.closed_s, run.ended_s, run.sent, run.results, run.exhausted,
            measured.completed, measured.prompt_tokens, measured.output_tokens, run.cancelled,
        ),
        turns=turn_logs(run), loop_late_s=run.loop_late_s,
    )  # fmt: skip


def turn_logs(run: WindowRun) -> dict[str, dict]:
    return {s.result.request_id: log.to_json() for s, log in zip(run.results, run.turns or ())}


def whole_sessions_run(run: WindowRun) -> LevelRun:
    """A whole pass of sessions on a ramp (run_window's `whole_sessions`) as a serving level's
    pass: every turn counted, throughput over the whole pass, each session's start lag kept."""
    if run.cancelled or not all(run.counted):  # a session's task failed mid-turn: a fault here, not the server
        raise RuntimeError(
            f"a whole pass of sessions left {len(run.cancelled)} turns unfinished and {run.counted.count(False)} "
            "uncounted"
        )
    return LevelRun(
        results=run.results, duration_s=run.ended_s, metrics=run.metrics, client_cpu_s=run.client_cpu_s,
        scheduled=[], started=run.started, processes=run.processes, process_cpu_s=run.process_cpu_s,
        turns=turn_logs(run), session_start_lags=run.counted_send_lags_s,
    )  # fmt: skip


class RequestSupply:
    """Distinct requests in a seeded order. `take()` gives one
    probe's iterator: from where the last one stopped, through the end and round from the start
    up to where it began, so a probe never sends a row twice and probes see fresh rows until
    the pool is used up. `make_request(row, n)`: the row as sent, n its draw number (its id tag)."""

    def __init__(self, rows: list[dict], make_request, seed: int):
        self.rows = list(rows)
        random.Random(seed).shuffle(self.rows)
        self.make_request, self.position, self.drawn = make_request, 0, 0

    def take(self) -> Iterator[LoadRequest]:
        start = self.position % len(self.rows) if self.rows else 0

        def draw():
            for index in itertools.chain(range(start, len(self.rows)), range(start)):
                self.position, self.drawn = index + 1, self.drawn + 1
                yield self.make_request(self.rows[index], self.drawn)

        return draw()
