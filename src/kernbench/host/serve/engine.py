"""The serving loop: one NPU runs one step at a time; requests arrive, are scheduled by a
policy, and leave when their last token is out.

At each step boundary (time t): every request that has arrived by t joins the waiting
queue, the policy forms a step, the step's time comes from the step timer, and at t + its
time each prefill that completes and each decode emits a token. With nothing to run the
clock jumps to the next arrival. Everything is integer nanoseconds, so a run is exact
and the same inputs give the same result on any machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kernbench.host.serve.kv_cache import PagedKvCache
from kernbench.host.serve.policies import Policy
from kernbench.host.serve.state import SchedState, Seq
from kernbench.host.serve.steps import StepTimer
from kernbench.host.serve.workload import Request


@dataclass
class Timeline:
    """The run cut into rows over which nothing the rows count changes: each step, cut
    again at every arrival during it. A row holds its start and end (ns) and, during it,
    the KV blocks used, the running and the waiting sequences; `tokens` is the new tokens
    of the step ending at the row's end (0 on a row a later arrival cuts off). So Σ (end −
    start) × (running + waiting) is the requests' time in the system, exactly."""

    end_ns: list[int] = field(default_factory=list)
    start_ns: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


@dataclass
class ServeRun:
    seqs: list[Seq]
    timeline: Timeline
    preemptions: int
    end_ns: int


def serve_requests(requests: list[Request], policy: Policy, kv: PagedKvCache,
                   timer: StepTimer, finished: Callable[[int], None] | None = None
                   ) -> ServeRun:
    """Serve `requests` (sorted by arrival) to completion. `finished(n)`, when given, is
    told after every step how many requests have finished (a progress display)."""
    seqs = [Seq(r) for r in requests]
    state = SchedState(kv)
    tl = Timeline()
    t, nxt, done = 0, 0, 0
    n = len(seqs)
    while done < n:
        while nxt < n and seqs[nxt].req.arrival_ns <= t:
            state.waiting.append(seqs[nxt])
            nxt += 1
        if not state.waiting and not state.running:
            t = seqs[nxt].req.arrival_ns
            continue
        step = policy.schedule(state, t)
        start = t
        t += timer.ns(step)
        _rows(tl, seqs, nxt, start, t, (kv.used, len(state.running), len(state.waiting)),
              step.tokens())
        for s, c in step.prefill:
            s.computed += c
            if s.computed == s.target:
                done += _emit(state, s, t)
        for s in step.decode:
            s.computed += 1
            done += _emit(state, s, t)
        if finished is not None:
            finished(done)
    return ServeRun(seqs, tl, state.preemptions, t)


def _emit(state: SchedState, s: Seq, t: int) -> int:
    """`s` emits a token at t; 1 if that was its last."""
    s.generated += 1
    if s.first_token_ns is None:
        s.first_token_ns = t
    if s.generated == s.req.output:
        state.finish(s, t)
        return 1
    return 0


def _rows(tl: Timeline, seqs: list[Seq], nxt: int, start: int, end: int,
          counts: tuple[int, int, int], tokens: int) -> None:
    """The step [start, end) as timeline rows: (blocks, running, waiting) as the step
    started, the waiting count one higher from each arrival during the step (those join
    the queue at its end); the step's tokens on the last row."""
    blocks, running, waiting = counts
    a = start
    while nxt < len(seqs) and (b := seqs[nxt].req.arrival_ns) < end:
        if b > a:
            tl.start_ns.append(a)
            tl.end_ns.append(b)
            tl.blocks.append(blocks)
            tl.running.append(running)
            tl.waiting.append(waiting)
            tl.tokens.append(0)
            a = b
        waiting += 1
        nxt += 1
    tl.start_ns.append(a)
    tl.end_ns.append(end)
    tl.blocks.append(blocks)
    tl.running.append(running)
    tl.waiting.append(waiting)
    tl.tokens.append(tokens)
