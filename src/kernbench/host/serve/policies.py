"""Scheduler policies: one class each, found by name in a small registry (like the
hardware components' `impl:` names).

A policy forms the next step from the scheduler state (`SchedState`): which waiting
sequences it admits, which prefill chunks and decodes run. It returns an empty step only
when nothing is waiting or running. Limits (`Limits`): `max_batch` sequences running at
once, `max_batch_tokens` new tokens per step (the prefill budget).

- `static`: fixed batches. When nothing runs, up to `max_batch` waiting requests (FCFS,
  those whose whole prompt + output fits the free KV blocks) start together: one prefill
  padded to the longest prompt, then decode steps until the last finishes (finished
  sequences leave the batch; no request joins it). Blocks are reserved for the whole
  output at admission, so nothing is preempted; a request whose padding would take the
  batch's padded prompts beyond the cache's tokens waits for the next batch.
- `continuous`: iteration-level batching as vLLM's default scheduler. Before each decode
  step, waiting requests are admitted FCFS while the batch has room, their prompts fit
  `max_batch_tokens` and their blocks fit the cache; if any were admitted the step is
  their prefill (one program per prompt), else a decode step of every running sequence.
  A decode that needs a block when none is free preempts the latest-admitted sequence
  (recomputed later: its prompt and generated tokens in one prefill, alone in its step
  when they exceed `max_batch_tokens`).
- `chunked`: chunked prefill mixed with decode (Sarathi, vLLM's chunked prefill): every
  step decodes all decoding sequences, then fills the rest of `max_batch_tokens` with
  prefill chunks, first of running sequences, then of new admissions; a new sequence
  takes blocks for its whole prompt when it is admitted.

- `disaggregated` (host/serve/disagg.py): prefill chips and decode chips of a multi-chip
  system, the KV cache sent between them; it runs its own event loop, not `schedule`.

Register a new policy with `@register` on a `Policy` subclass with a unique `name`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernbench.errors import InputError
from kernbench.host.serve.state import SchedState, Seq, Step


@dataclass(frozen=True)
class Limits:
    max_batch: int = 64
    max_batch_tokens: int = 8192


class Policy:
    """Base class: `schedule(state, now_ns)` → the next Step."""

    name: ClassVar[str] = ""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    def schedule(self, state: SchedState, now_ns: int) -> Step:
        state.now_ns = now_ns  # when a preemption in this pass happens
        # a pass may only preempt (its decodes lost their blocks): the next one admits
        for _ in range(3):
            step = self._form(state, now_ns)
            if step.prefill or step.decode or not (state.waiting or state.running):
                return step
        raise RuntimeError(f"policy {self.name} formed no step with "
                           f"{len(state.waiting)} waiting, {len(state.running)} running")

    def _form(self, state: SchedState, now_ns: int) -> Step:
        raise NotImplementedError

    def check(self, prompt: int, output: int) -> None:
        """InputError when a request of these lengths can never be scheduled."""


POLICIES: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    if not cls.name or cls.name in POLICIES:
        raise ValueError(f"policy name {cls.name!r} is empty or taken")
    POLICIES[cls.name] = cls
    return cls


#: prefill chips and decode chips (host/serve/disagg.py): not a one-NPU step former, so not
#: in POLICIES; `policy_for` gives it a `Continuous` for its limits and its checks
DISAGGREGATED = "disaggregated"
#: fixed batches (`Static`): no per-step token budget
STATIC = "static"


def policy_for(name: str, limits: Limits) -> Policy:
    if name not in POLICIES and name != DISAGGREGATED:
        raise InputError(f"unknown policy '{name}' (known: "
                         f"{', '.join(sorted([*POLICIES, DISAGGREGATED]))})", field="--policy")
    for opt, v in (("--max-batch", limits.max_batch),
                   ("--max-batch-tokens", limits.max_batch_tokens)):
        if v < 1:
            raise InputError(f"must be >= 1, got {v}", field=opt)
    return POLICIES.get(name, Continuous)(limits)


@register
class Static(Policy):
    name = STATIC

    def _form(self, state: SchedState, now_ns: int) -> Step:
        if state.running:
            return Step(decode=state.grow_decodes(list(state.running)))
        batch: list[tuple[Seq, int]] = []
        longest = 0
        room = state.kv.blocks * state.kv.block_tokens  # tokens the cache holds at most
        while state.waiting and len(batch) < self.limits.max_batch:
            s = state.waiting[0]
            chunk = s.target - s.computed
            # the padded prefill caches every prompt at the longest one's length: a batch
            # whose padded prompts exceed the cache could not run (never true of the first)
            if batch and (len(batch) + 1) * max(longest, chunk) > room:
                break
            if not state.kv.grow(s.id, max(s.target, s.req.prompt + s.req.output - 1)):
                break
            state.admit(s, now_ns)
            batch.append((s, chunk))
            longest = max(longest, chunk)
        return Step(prefill=batch, padded_prefill=True)


@register
class Continuous(Policy):
    name = "continuous"

    def check(self, prompt: int, output: int) -> None:
        budget = self.limits.max_batch_tokens
        if prompt > budget:
            raise InputError(f"a prompt of {prompt} tokens does not fit one step of {budget} "
                             "tokens (use the chunked policy or raise it)",
                             field="--max-batch-tokens")

    def _form(self, state: SchedState, now_ns: int) -> Step:
        batch, tokens = [], 0
        while state.waiting and len(state.running) < self.limits.max_batch:
            s = state.waiting[0]
            need = s.target - s.computed
            # a preempted sequence recomputes its prompt and what it generated in one
            # prefill: beyond the budget, it runs alone in its step
            over = tokens + need > self.limits.max_batch_tokens
            if (over and (batch or not s.preemptions)) or not state.kv.grow(s.id, s.target):
                break
            state.admit(s, now_ns)
            batch.append((s, need))
            tokens += need
        if batch:
            return Step(prefill=batch)
        return Step(decode=state.grow_decodes(list(state.running)))


@register
class Chunked(Policy):
    name = "chunked"

    def _form(self, state: SchedState, now_ns: int) -> Step:
        dec = state.grow_decodes([s for s in state.running if not s.prefilling])
        budget = self.limits.max_batch_tokens - len(dec)
        pre = []
        for s in list(state.running):
            if budget <= 0:
                break
            if s.running and s.prefilling:
                c = min(s.target - s.computed, budget)
                if state.reserve(s, s.computed + c):
                    pre.append((s, c))
                    budget -= c
        # a chunk's reservation may have preempted a decode or an earlier chunk
        dec = [s for s in dec if s.running]
        pre = [(s, c) for s, c in pre if s.running]
        budget = self.limits.max_batch_tokens - len(dec) - sum(c for _, c in pre)
        while budget > 0 and state.waiting and len(state.running) < self.limits.max_batch:
            s = state.waiting[0]
            c = min(s.target - s.computed, budget)
            # blocks for the whole prefill at admission (vLLM's can_allocate): its later
            # chunks then never take blocks from, or preempt, another partial prefill
            if not state.kv.grow(s.id, s.target):
                break
            state.admit(s, now_ns)
            pre.append((s, c))
            budget -= c
        return Step(prefill=pre, decode=dec)
