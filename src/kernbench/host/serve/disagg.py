"""Disaggregated serving: prefill chips and decode chips, the KV cache sent between them.

The system's chips are split in two pools (`prefill_chips` first, the rest decode); every
chip holds the whole model and its own paged KV cache. A request:

1. joins the prefill chip with the fewest prompt tokens queued or in progress (ties: the
   lowest chip), and waits there (FCFS);
2. is prefilled: an idle prefill chip runs one step of the waiting prompts that fit
   `max_batch_tokens` and its KV cache (one program per prompt, as `continuous`); the
   step's end emits the first token;
3. is sent: its KV cache (prompt tokens × the model's KV bytes per token) goes to the
   decode chip with the most free blocks (ties: the lowest), which reserves blocks for the
   request's whole life (prompt + output − 1 tokens, so a decode chip never preempts);
   a request waits on its prefill chip, holding that chip's blocks, until a decode chip
   has room. A prefill chip sends one KV cache at a time (its links are one FIFO), each
   transfer timed by `transfer_ns(tokens, src, dst)`;
4. is decoded: an idle decode chip admits the requests that have arrived (up to
   `max_batch` running) and runs one batched decode step of all of them.

Everything is events in integer ns, processed in (time, order of scheduling); at one
instant, arrivals come first, then step and transfer ends, then idle chips start steps
(prefill chips, then decode chips, in chip order). So a run is deterministic.

The timeline is the run cut at every event while a request is in the system: segments
with, during the segment, the blocks used over all chips and the requests in the system
(waiting: queued for prefill or arrived at a decode chip and not yet admitted; running:
the rest, sends included), and the new tokens of the steps that ended at its end (prompt
tokens prefilled, tokens decoded: what a step's row counts under the other policies).
That is what `results.py` reads for occupancy, busy fraction and Little's law.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kernbench.host.serve.engine import ServeRun, Timeline
from kernbench.host.serve.kv_cache import PagedKvCache
from kernbench.host.serve.policies import Limits
from kernbench.host.serve.state import Seq, Step
from kernbench.host.serve.steps import StepTimer
from kernbench.host.serve.workload import Request

# event kinds, in the order they are handled at one instant
_ARRIVE, _PREFILL_END, _SENT, _DECODE_END = 0, 1, 2, 3


@dataclass
class _Chip:
    kv: PagedKvCache
    queue: deque[Seq] = field(default_factory=deque)   # prefill: waiting; decode: arrived
    running: list[Seq] = field(default_factory=list)   # in this chip's current step / batch
    busy: bool = False
    queued_tokens: int = 0                             # prefill: prompts queued or running


@dataclass
class _Pools:
    prefill: list[_Chip]
    decode: list[_Chip]
    link_free_ns: list[int]                            # per prefill chip: its FIFO's end
    outbox: list[deque[Seq]]                           # per prefill chip: prefilled, unsent
    in_system: int = 0
    waiting: int = 0


def serve_disaggregated(requests: list[Request], limits: Limits, prefill_blocks: int,
                        decode_blocks: int, block_tokens: int, prefill_chips: int,
                        decode_chips: int, timer: StepTimer,
                        transfer_ns: Callable[[int, int, int], int]) -> ServeRun:
    """Serve `requests` (sorted by arrival) to completion; see the module docstring.
    `transfer_ns(tokens, src, dst)`: ns to send `tokens` tokens' KV from prefill chip
    `src` to decode chip `dst` (pool indices)."""
    seqs = [Seq(r) for r in requests]
    pools = _Pools([_Chip(PagedKvCache(prefill_blocks, block_tokens))
                    for _ in range(prefill_chips)],
                   [_Chip(PagedKvCache(decode_blocks, block_tokens))
                    for _ in range(decode_chips)],
                   [0] * prefill_chips, [deque() for _ in range(prefill_chips)])
    events: list[tuple[int, int, int, int, object]] = []
    order = 0

    def at(t: int, kind: int, chip: int, what: object) -> None:
        nonlocal order
        heapq.heappush(events, (t, kind, order, chip, what))
        order += 1

    for s in seqs:
        at(s.req.arrival_ns, _ARRIVE, 0, s)
    tl = Timeline()
    open_segment = False
    while events:
        t = events[0][0]
        new = 0
        while events and events[0][0] == t:
            _, kind, _, chip, what = heapq.heappop(events)
            new += _handle(pools, kind, chip, what, t)
        _send(pools, t, transfer_ns, at)
        _start_steps(pools, limits, t, timer, at)
        if open_segment:  # the segment ending now: the tokens of the steps ending now
            tl.tokens[-1] = new
        open_segment = bool(events and pools.in_system)
        if open_segment:  # nothing it counts changes before the next event
            tl.start_ns.append(t)
            tl.end_ns.append(events[0][0])
            tl.blocks.append(sum(c.kv.used for c in pools.prefill + pools.decode))
            tl.running.append(pools.in_system - pools.waiting)
            tl.waiting.append(pools.waiting)
            tl.tokens.append(0)
    if pools.in_system:
        raise RuntimeError(f"disaggregated serving stalled with {pools.in_system} requests "
                           "in the system")
    end = max(s.finish_ns for s in seqs) if seqs else 0
    return ServeRun(seqs, tl, 0, end)


def _handle(p: _Pools, kind: int, chip: int, what: object, t: int) -> int:
    """Apply one event; the new tokens of the step it ends (0 for other events)."""
    if kind == _ARRIVE:
        s = what
        assert isinstance(s, Seq)
        i = min(range(len(p.prefill)), key=lambda k: (p.prefill[k].queued_tokens, k))
        p.prefill[i].queue.append(s)
        p.prefill[i].queued_tokens += s.req.prompt
        p.in_system += 1
        p.waiting += 1
        return 0
    if kind == _PREFILL_END:
        c = p.prefill[chip]
        c.busy = False
        done = c.running
        c.running = []
        new = 0
        for s in done:
            new += s.target - s.computed
            s.computed = s.target
            s.generated = 1
            s.first_token_ns = t
            c.queued_tokens -= s.req.prompt
            if s.req.output == 1:
                c.kv.free(s.id)
                s.finish_ns = t
                p.in_system -= 1
            else:
                p.outbox[chip].append(s)
        return new
    if kind == _SENT:
        src, s = what  # type: ignore[misc]
        p.prefill[src].kv.free(s.id)
        p.decode[chip].queue.append(s)
        p.waiting += 1
        return 0
    c = p.decode[chip]
    c.busy = False
    for s in list(c.running):
        s.computed += 1
        s.generated += 1
        if s.generated == s.req.output:
            s.finish_ns = t
            c.running.remove(s)
            c.kv.free(s.id)
            p.in_system -= 1
    return len(what)  # type: ignore[arg-type]


def _send(p: _Pools, t: int, transfer_ns: Callable[[int, int, int], int],
          at: Callable[[int, int, int, object], None]) -> None:
    """Start the transfers of prefilled requests that a decode chip has room for."""
    for src, box in enumerate(p.outbox):
        while box:
            s = box[0]
            life = s.req.prompt + s.req.output - 1
            dst = max(range(len(p.decode)),
                      key=lambda k: (p.decode[k].kv.blocks - p.decode[k].kv.used, -k))
            if not p.decode[dst].kv.grow(s.id, life):
                break
            box.popleft()
            start = max(t, p.link_free_ns[src])
            end = start + transfer_ns(s.computed, src, dst)
            p.link_free_ns[src] = end
            at(end, _SENT, dst, (src, s))


def _start_steps(p: _Pools, limits: Limits, t: int, timer: StepTimer,
                 at: Callable[[int, int, int, object], None]) -> None:
    for i, c in enumerate(p.prefill):
        if c.busy or not c.queue:
            continue
        batch, tokens = [], 0
        while c.queue:
            s = c.queue[0]
            if tokens + s.req.prompt > limits.max_batch_tokens and batch:
                break
            if not c.kv.grow(s.id, s.req.prompt):
                break
            c.queue.popleft()
            s.running = True
            s.admitted_ns = t
            batch.append((s, s.req.prompt))
            tokens += s.req.prompt
            p.waiting -= 1
        if batch:
            c.busy = True
            c.running = [s for s, _ in batch]
            at(t + timer.ns(Step(prefill=batch)), _PREFILL_END, i, None)
    for i, c in enumerate(p.decode):
        if c.busy:
            continue
        while c.queue and len(c.running) < limits.max_batch:
            c.running.append(c.queue.popleft())
            p.waiting -= 1
        if c.running:
            c.busy = True
            batch = list(c.running)
            at(t + timer.ns(Step(decode=batch)), _DECODE_END, i, batch)
