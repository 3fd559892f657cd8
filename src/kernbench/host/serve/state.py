"""The scheduler's view of a run: sequences, the waiting queue, the running batch, the KV
cache, and the step a policy forms.

A sequence's tokens: `target` tokens are prefilled (the prompt, or after a preemption the
prompt plus every token generated so far: recompute), and the step that completes the
prefill emits one token; each decode step then feeds the last token (its KV is written)
and emits the next. So after any step a decoding sequence has `computed` = prompt +
generated − 1 cached tokens, and a decode step's context is `computed` past tokens.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kernbench.host.serve.kv_cache import PagedKvCache
from kernbench.host.serve.workload import Request


@dataclass(eq=False)
class Seq:
    """One request while it is served."""

    req: Request
    computed: int = 0          # tokens whose KV is cached
    target: int = 0            # tokens to prefill before the next token is emitted
    generated: int = 0         # tokens emitted so far
    preemptions: int = 0
    admitted_ns: int | None = None   # first admission (the end of its queueing)
    first_token_ns: int | None = None
    finish_ns: int | None = None
    running: bool = False      # in SchedState.running
    # each preemption: (when it lost its cache, when it was admitted again or None)
    preempted: list[list[int | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.target = self.req.prompt

    @property
    def id(self) -> int:
        return self.req.id

    @property
    def prefilling(self) -> bool:
        return self.computed < self.target

    def restart(self) -> None:
        """Preempted: its cache is dropped; it recomputes prompt + generated tokens."""
        self.computed = 0
        self.target = self.req.prompt + self.generated
        self.preemptions += 1


@dataclass
class Step:
    """What one iteration runs: prefill chunks (sequence, new tokens) and decode
    sequences (one token each). `padded_prefill`: the prefills run as one batch padded
    to the longest (static batching); otherwise one program per chunk."""

    prefill: list[tuple[Seq, int]] = field(default_factory=list)
    decode: list[Seq] = field(default_factory=list)
    padded_prefill: bool = False

    def tokens(self) -> int:
        return sum(c for _, c in self.prefill) + len(self.decode)


@dataclass
class SchedState:
    """Waiting (arrived, not running; FCFS, preempted ones first) and running sequences
    (in admission order), and the KV cache. Policies change it only through these
    methods, so block accounting stays in one place."""

    kv: PagedKvCache
    waiting: deque[Seq] = field(default_factory=deque)
    running: list[Seq] = field(default_factory=list)
    preemptions: int = 0
    now_ns: int = 0  # the time of the step being formed (set by Policy.schedule)

    def admit(self, s: Seq, now_ns: int) -> None:
        if self.waiting and self.waiting[0] is s:
            self.waiting.popleft()
        else:
            self.waiting.remove(s)
        s.running = True
        if s.admitted_ns is None:
            s.admitted_ns = now_ns
        elif s.preempted and s.preempted[-1][1] is None:
            s.preempted[-1][1] = now_ns
        self.running.append(s)

    def preempt(self, s: Seq) -> None:
        """Drop `s`'s cache and put it at the head of the queue (recompute later)."""
        self.running.remove(s)
        s.running = False
        self.kv.free(s.id)
        s.restart()
        s.preempted.append([self.now_ns, None])
        self.waiting.appendleft(s)
        self.preemptions += 1

    def reserve(self, s: Seq, tokens: int) -> bool:
        """Blocks for `s` to hold `tokens` tokens, preempting the latest-admitted running
        sequence while a block is missing (vLLM's recompute preemption). False when `s`
        itself had to go."""
        while not self.kv.grow(s.id, tokens):
            victim = self.running[-1]
            self.preempt(victim)
            if victim is s:
                return False
        return True

    def grow_decodes(self, seqs: list[Seq]) -> list[Seq]:
        """Blocks for one more token of each decoding sequence in `seqs` (`reserve`);
        the sequences that still decode this step."""
        return [s for s in seqs if s.running and self.reserve(s, s.computed + 1)]

    def finish(self, s: Seq, now_ns: int) -> None:
        s.finish_ns = now_ns
        s.running = False
        self.running.remove(s)
        self.kv.free(s.id)
