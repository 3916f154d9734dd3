"""KV-cache allocator simulator: contiguous reservation strategies vs PagedAttention paging.

A trace of requests (arrival step, prompt length, output length) is replayed step by step:
every running sequence stores one more token per step, and its memory is freed when it has
produced its output. Requests are admitted first come, first served, when their allocation
fits. Contiguous strategies reserve a fixed region at admission in a first-fit address
space (so external fragmentation is real, not assumed); paged strategies allocate one block
at a time as a sequence grows and, like vLLM, preempt the newest sequence when the pool runs
out (a paged strategy that reserves, the live KV check's rival, takes its blocks at admission;
its categories then count reserved blocks as internal fragmentation). Memory is split into
the PagedAttention paper's categories each step:

    token states            slots holding a stored token
    reservation             reserved slots that this request will still fill
    internal fragmentation  reserved or allocated slots it will never fill (the paged
                            strategies' unfilled tail of each sequence's last block)
    external fragmentation  free slots stranded while the next request waits although the
                            free total would hold it (contiguous strategies only)
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class TraceRequest:
    prompt: int
    output: int
    max_tokens: int | None = None  # the requested output limit; defaults to the true output
    arrival: int = 0
    prefix_group: int | None = None  # requests of one group share their first `prefix_len` tokens
    prefix_len: int = 0

    @property
    def final(self) -> int:
        return self.prompt + self.output


@dataclass(frozen=True)
class Strategy:
    name: str
    kind: str  # "contiguous" or "paged"
    # contiguous: "max_model_len", "max_tokens", "pow2" or "oracle"; paged: None (blocks on
    # demand, as vLLM) or "max_tokens" (the blocks of prompt + max_tokens from admission on)
    reserve: str | None = None
    block_size: int = 1
    share_prefix: bool = False


def standard_strategies(block_sizes: list[int]) -> list[Strategy]:
    """Issue 4's strategies; prefix sharing is added only where a trace shares prefixes."""
    strategies = [
        Strategy("contiguous_max_model_len", "contiguous", "max_model_len"),
        Strategy("contiguous_prompt_plus_max_tokens", "contiguous", "max_tokens"),
        Strategy("contiguous_pow2", "contiguous", "pow2"),
        Strategy("contiguous_oracle", "contiguous", "oracle"),
    ]
    return strategies + [Strategy(f"paged_{size}", "paged", block_size=size) for size in block_sizes]


def prefix_sharing_strategies(block_sizes: list[int]) -> list[Strategy]:
    """Paging with and without shared prefix blocks, at each block size."""
    return [
        Strategy(f"paged_{size}{suffix}", "paged", block_size=size, share_prefix=share)
        for size in block_sizes
        for suffix, share in (("", False), ("_shared_prefix", True))
    ]


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (0 for 0)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def reservation(strategy: Strategy, request: TraceRequest, max_model_len: int) -> int:
    """Slots a contiguous strategy reserves for a request at admission."""
    if strategy.reserve == "max_model_len":
        return max_model_len
    if strategy.reserve == "max_tokens":
        return request.prompt + (request.max_tokens if request.max_tokens is not None else request.output)
    if strategy.reserve == "pow2":
        # Orca (Pow2) as the PagedAttention paper runs it: the prompt plus the true output
        # length rounded up to a power of two (at most 2x over-reservation of the output).
        return min(request.prompt + next_pow2(request.output), max(max_model_len, request.final))
    if strategy.reserve == "oracle":
        return request.final
    raise ValueError(f"unknown reservation {strategy.reserve!r}")


def shared_blocks(strategy: Strategy, request: TraceRequest) -> int:
    """Full blocks of the shared prefix: only whole blocks can be shared (as vLLM hashes them)."""
    if not (strategy.share_prefix and request.prefix_group is not None):
        return 0
    return request.prefix_len // strategy.block_size


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def held_blocks(strategy: Strategy, request: TraceRequest, stored: int) -> int:
    """Private blocks (its shared prefix blocks apart) a paged strategy's request holds with
    `stored` tokens in the pool: on demand, the blocks those tokens fill; reserving, the blocks
    of prompt + max_tokens from admission on. The replay admits and grows sequences by it, and
    the live KV check (kv/validation.py) predicts the server's usage by it."""
    if strategy.reserve == "max_tokens":
        stored = max(stored, reservation(strategy, request, 0))
    return blocks_for(max(0, stored - shared_blocks(strategy, request) * strategy.block_size), strategy.block_size)


# ----------------------------------------------------------------------------- capacity


def slots_in_budget(strategy: Strategy, budget_bytes: int, kv_bytes_per_token: int) -> int:
    """Token slots a byte budget holds: whole blocks for paging, as vLLM sizes its pool."""
    if strategy.kind == "paged":
        return (budget_bytes // (kv_bytes_per_token * strategy.block_size)) * strategy.block_size
    return budget_bytes // kv_bytes_per_token


def peak_slots(strategy: Strategy, request: TraceRequest, max_model_len: int, groups_paid: set) -> int:
    """Slots a request holds at its largest (its last token), counting a shared prefix once."""
    if strategy.kind == "contiguous":
        return reservation(strategy, request, max_model_len)
    shared = shared_blocks(strategy, request)
    own = held_blocks(strategy, request, request.final) * strategy.block_size
    if shared and request.prefix_group not in groups_paid:
        own += shared * strategy.block_size
    return own


def static_capacity(trace: list[TraceRequest], strategy: Strategy, capacity_slots: int, max_model_len: int) -> int:
    """How many requests fit at once, each at its peak footprint: requests are taken from the
    trace in order (cycling) and admitted until the next one does not fit. No averages."""
    used, admitted, groups_paid = 0, 0, set()
    smallest = min(peak_slots(strategy, r, max_model_len, {r.prefix_group}) for r in trace)
    limit = capacity_slots // max(1, smallest) + len(trace) + 1
    for request in itertools.cycle(trace):
        need = peak_slots(strategy, request, max_model_len, groups_paid)
        if used + need > capacity_slots or admitted >= limit:
            break
        used += need
        admitted += 1
        if request.prefix_group is not None:
            groups_paid.add(request.prefix_group)
    return admitted


# ------------------------------------------------------------------------------- replay


class FirstFit:
    """A contiguous address space with first-fit allocation and coalescing frees."""

    def __init__(self, size: int):
        self.holes = [(0, size)]  # (start, length), sorted by start
        self.free_total = size

    def allocate(self, length: int) -> int | None:
        for index, (start, hole) in enumerate(self.holes):
            if hole >= length:
                if hole == length:
                    self.holes.pop(index)
                else:
                    self.holes[index] = (start + length, hole - length)
                self.free_total -= length
                return start
        return None

    def free(self, start: int, length: int) -> None:
        self.holes.append((start, length))
        self.holes.sort()
        merged = [self.holes[0]]
        for begin, size in self.holes[1:]:
            last_begin, last_size = merged[-1]
            if last_begin + last_size == begin:
                merged[-1] = (last_begin, last_size + size)
            else:
                merged.append((begin, size))
        self.holes = merged
        self.free_total += length


@dataclass
class Sequence:
    index: int
    request: TraceRequest
    length: int  # tokens stored
    reserved: int = 0  # contiguous: slots reserved
    address: int = 0  # contiguous: start of the region
    blocks: int = 0  # paged: private blocks held
    shared: int = 0  # paged: shared prefix blocks used


@dataclass
class ReplayResult:
    strategy: str
    capacity_slots: int
    steps: int = 0
    completed: int = 0
    rejected: int = 0  # requests larger than the whole budget
    preemptions: int = 0
    peak_running: int = 0
    peak_allocated: int = 0  # slots
    running_steps: int = 0  # sum over steps of the running count
    slot_steps: dict = field(
        default_factory=lambda: dict.fromkeys(
            ("token_states", "reservation", "internal_fragmentation", "external_fragmentation"), 0
        )
    )
    timeline: list = field(default_factory=list)  # (step, allocated, used, running, waiting)

    def to_json(self) -> dict:
        total = sum(self.slot_steps.values())
        allocated = total - self.slot_steps["external_fragmentation"]
        record = asdict(self)
        record["shares"] = {key: (value / total if total else math.nan) for key, value in self.slot_steps.items()}
        record["utilisation"] = self.slot_steps["token_states"] / allocated if allocated else math.nan
        record["mean_running"] = self.running_steps / self.steps if self.steps else 0.0
        return record


def replay(
    trace: list[TraceRequest],
    strategy: Strategy,
    capacity_slots: int,
    max_model_len: int,
    timeline_points: int = 200,
    max_running: int | None = None,
) -> ReplayResult:
    """Replay `trace`; `max_running` caps concurrent sequences (a client's concurrency, or the
    engine's max_num_seqs)."""
    result = ReplayResult(strategy.name, capacity_slots)
    pending = deque(sorted(range(len(trace)), key=lambda i: trace[i].arrival))
    waiting: deque[int] = deque()
    running: dict[int, Sequence] = {}  # insertion order = admission order
    resume_at: dict[int, int] = {}  # preempted request -> tokens it had (vLLM recomputes them)
    block = strategy.block_size
    paged = strategy.kind == "paged"
    space = None if paged else FirstFit(capacity_slots)
    free_blocks = capacity_slots // block if paged else 0
    group_users: dict[int, int] = {}  # prefix group -> running sequences sharing its blocks
    group_blocks: dict[int, int] = {}
    sample_every = max(1, sum(r.output for r in trace) // max(1, timeline_points) // 4)
    step = 0

    def admit(index: int) -> bool:
        """Allocate for a request's stored tokens; False when it does not fit now."""
        nonlocal free_blocks
        request = trace[index]
        length = resume_at.get(index, request.prompt)
        if not paged:
            size = reservation(strategy, request, max_model_len)
            address = space.allocate(size)
            if address is None:
                return False
            running[index] = Sequence(index, request, length, reserved=size, address=address)
            return True
        shared = shared_blocks(strategy, request)
        new_group = shared and group_users.get(request.prefix_group, 0) == 0
        private = held_blocks(strategy, request, length)
        if private + (shared if new_group else 0) > free_blocks:
            return False
        free_blocks -= private + (shared if new_group else 0)
        if shared:
            group_users[request.prefix_group] = group_users.get(request.prefix_group, 0) + 1
            group_blocks[request.prefix_group] = shared
        running[index] = Sequence(index, request, length, blocks=private, shared=shared)
        return True

    def release(seq: Sequence) -> None:
        nonlocal free_blocks
        del running[seq.index]
        if not paged:
            space.free(seq.address, seq.reserved)
            return
        free_blocks += seq.blocks
        if seq.shared:
            group = seq.request.prefix_group
            group_users[group] -= 1
            if group_users[group] == 0:
                del group_users[group]
                free_blocks += group_blocks.pop(group)

    while pending or waiting or running:
        while pending and trace[pending[0]].arrival <= step:
            waiting.append(pending.popleft())
        blocked_need = None
        while waiting:
            head = trace[waiting[0]]
            if peak_slots(strategy, head, max_model_len, set()) > capacity_slots:
                waiting.popleft()  # could never run, whatever else is freed
                result.rejected += 1
            elif max_running is not None and len(running) >= max_running:
                break
            elif admit(waiting[0]):
                waiting.popleft()
            else:
                blocked_need = None if paged else reservation(strategy, head, max_model_len)
                break
        if not running:
            if pending:
                step = max(step, trace[pending[0]].arrival)
                continue
            break
        # One decoding step: every running sequence stores one more token.
        for index in list(running):
            seq = running.get(index)
            if seq is None:
                continue  # preempted earlier in this step
            if paged:
                while held_blocks(strategy, seq.request, seq.length + 1) > seq.blocks and index in running:
                    if free_blocks == 0:
                        victim = running[next(reversed(running))]  # vLLM preempts the newest request
                        resume_at[victim.index] = victim.length
                        release(victim)
                        waiting.appendleft(victim.index)
                        result.preemptions += 1
                    else:
                        free_blocks -= 1
                        seq.blocks += 1
                if index not in running:
                    continue
            seq.length += 1
        # This step's memory, by category.
        used = sum(seq.length - seq.shared * block for seq in running.values()) + block * sum(group_blocks.values())
        if paged:
            allocated = capacity_slots - free_blocks * block
            slots = (used, 0, allocated - used, 0)
        else:
            will_fill = sum(min(seq.reserved, seq.request.final) for seq in running.values())
            allocated = sum(seq.reserved for seq in running.values())
            stranded = blocked_need is not None and space.free_total >= blocked_need
            slots = (used, will_fill - used, allocated - will_fill, space.free_total if stranded else 0)
        for key, value in zip(result.slot_steps, slots):
            result.slot_steps[key] += value
        result.running_steps += len(running)
        result.peak_running = max(result.peak_running, len(running))
        result.peak_allocated = max(result.peak_allocated, allocated)
        if step % sample_every == 0:
            result.timeline.append((step, allocated, used, len(running), len(waiting)))
        # Finished sequences free their memory.
        for seq in [s for s in running.values() if s.length >= s.request.final]:
            release(seq)
            resume_at.pop(seq.index, None)
            result.completed += 1
        step += 1
    result.steps = step
    if len(result.timeline) > timeline_points:
        result.timeline = result.timeline[:: math.ceil(len(result.timeline) / timeline_points)]
    return result
