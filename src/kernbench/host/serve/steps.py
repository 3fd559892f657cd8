"""A step's time, from simulated programs.

A step is the programs it runs back to back (the approximation, docs/serving.md):

- its decode sequences as one batched decode program (batch D, 1 new token, past = the
  mean of their cached tokens, rounded: the programs' KV cache has one length, a real
  ragged batch reads the same number of cached tokens in total);
- each prefill chunk as its own program (batch 1, chunk tokens, past = tokens already
  cached), or, for a padded static batch, one program (batch n, the longest prompt, 0).

A step that mixes prefill and decode is thus charged the sum of the two programs: a
realizable upper bound (the hardware may run them one after the other), which does not
credit the weight reads a fused mixed step would share.

`StepTimer` turns a step into integer nanoseconds through a `ProgramTimer`: `exact`
simulates every distinct shape; otherwise the bucket rule (`buckets.interpolate`) takes a
shape's time from simulated edges (and midpoints) around it. Simulated programs are
memoized by shape, so a run simulates each shape at most once. With `simulate_many` (a
pool of processes, `pool.ProgramPool`), the programs a new shape needs whatever their
times (`buckets.first_asked`: the edges around it) are simulated side by side before
interpolating; the same programs are simulated either way, so the times do not depend
on it.

With `speculate` (the same pool, programs simulated without being recorded), a
refinement that must simulate a midpoint (its edges' times disagree) also simulates,
beside it, the next midpoints it would ask if the refinement goes on
(`buckets.midpoint_chain`), `width` programs in all: the pool's other workers would
otherwise wait. A program simulated ahead is used (and handed to `record`, the step
cache) only when the refinement asks for it; the ones never asked are counted in
`spare_seconds` and change no output. A midpoint that `cached` (the step cache) already
knows needs no simulation, so nothing is simulated ahead of it.

A pool call that would still leave a worker idle (an odd number of programs on two
workers, or one program, which would otherwise run in this process) is filled with
programs the next steps are likely to ask for: the first programs (`first_asked`) of
the step's decode shape with one sequence more or one fewer, and with its past tokens
past the next edge. They are simulated ahead like a refinement's midpoints (a failing
one is dropped); each is used only if a later step asks for it. Which of the three
guesses goes first is learnt from the run: the one whose filled programs were asked for
most often so far (Laplace's rule: (asked + 1) / (filled + 2); ties in the order above).
In a saturated run the batch stays at its limit, so "fewer" goes unasked and the idle
workers go to the past tokens ahead. Guesses change only which programs are simulated
ahead, never a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kernbench.host.serve.buckets import (
    AGREE,
    TOLERANCE,
    edges_within,
    first_asked,
    interpolate,
)
from kernbench.host.serve.state import Step

Shape = tuple[int, int, int]  # (batch, new tokens, past tokens)

#: what a pool call fills idle workers with (module docstring): the step's decode batch
#: with one sequence more, with one fewer, and its past tokens past the next edge
GUESSES = ("more", "fewer", "later")


def step_programs(step: Step) -> list[Shape]:
    """The programs of `step`, in a fixed order (decode first, then the prefills)."""
    out: list[Shape] = []
    if step.decode:
        d = len(step.decode)
        past = sum(s.computed for s in step.decode)
        out.append((d, 1, max(1, (2 * past + d) // (2 * d))))  # mean, halves up
    if step.prefill and step.padded_prefill:
        out.append((len(step.prefill), max(c for _, c in step.prefill),
                    max(s.computed for s, _ in step.prefill)))
    elif step.prefill:
        out.extend((1, c, s.computed) for s, c in step.prefill)
    return out


@dataclass
class StepTimer:
    """`ns(step)`: the step's time; `simulate(shape)` gives a program's simulated ns,
    `simulate_many(shapes)` (optional) several at once as (ns, CPU s) pairs."""

    simulate: Callable[[Shape], float]
    exact: bool = False
    simulate_many: Callable[[list[Shape]], list[tuple[float, float]]] | None = None
    per_octave: tuple[int, int, int] | None = None  # edges an octave (None: the rule's)
    tol: tuple[float, float, float] = TOLERANCE  # the midpoint check's, per number
    agree: float = AGREE  # edges this many tolerances apart need no midpoint
    #: `speculate(shapes, optional)`: (ns, CPU s) of each, None for one of the last
    #: `optional` that failed
    speculate: Callable[[list[Shape], int], list[tuple[float, float] | None]] | None = None
    record: Callable[[Shape, float], None] | None = None  # a program simulated ahead, used
    cached: Callable[[Shape], float | None] | None = None  # a program known without simulating
    width: int = 1                # programs `speculate` runs side by side
    context: int | None = None    # the model's positions: no program asked beyond them
    max_batch: int | None = None  # the policy's: no batch beyond it is simulated ahead
    spare: dict[Shape, tuple[float, float]] = field(default_factory=dict)  # ahead: (ns, CPU s)
    programs: dict[Shape, float] = field(default_factory=dict)   # simulated, by shape
    shapes: dict[Shape, int] = field(default_factory=dict)       # each shape's ns (memo)
    steps: int = 0
    sim_seconds: float = 0.0      # CPU s of every simulation used, in this process or not
    local_seconds: float = 0.0    # CPU s of the simulations in this process
    #: per guess: [programs it filled idle workers with, of them asked for since]
    guesses: dict[str, list[int]] = field(
        default_factory=lambda: {g: [0, 0] for g in GUESSES})
    _guessed: dict[Shape, str] = field(default_factory=dict)  # a filled program's guess
    _chain: list[Shape] = field(default_factory=list)  # what the refinement asks next
    _step: list[Shape] = field(default_factory=list)   # the programs of the step asked

    def program_ns(self, shape: Shape) -> int:
        ns = self.shapes.get(shape)
        if ns is None:
            if self.exact:
                ns = round(self._simulated(shape))
            else:
                ahead = self._ahead if self.speculate is not None and self.width > 1 else None
                ns = round(interpolate(shape, self._simulated, per_octave=self.per_octave,
                                       ahead=ahead, tol=self.tol, context=self.context,
                                       agree=self.agree))
            self.shapes[shape] = ns
        return ns

    def ns(self, step: Step) -> int:
        self.steps += 1
        programs = step_programs(step)
        self._step = programs
        if self.simulate_many is not None and not self.exact:
            self._prefetch([c for p in programs if p not in self.shapes
                            for c in first_asked(p, self.per_octave, self.context)])
        return sum(self.program_ns(p) for p in programs)

    @property
    def spare_seconds(self) -> float:
        """CPU s of the programs simulated ahead and not (yet) asked for."""
        return sum(cpu for _, cpu in self.spare.values())

    def _ahead(self, chain: list[Shape]) -> None:
        self._chain = chain

    def _simulated(self, shape: Shape) -> float:
        t = self.programs.get(shape)
        if t is None and self.cached is not None:
            # a program already known (the step cache) is neither simulated nor a reason
            # to simulate the midpoints after it ahead: the next one may be known too
            t = self.cached(shape)
            if t is not None:
                self._chain = []
                t = self.programs[shape] = float(t)
                return t
        if t is None and shape in self.spare:
            t, cpu = self.spare.pop(shape)
            guess = self._guessed.pop(shape, None)
            if guess is not None:
                self.guesses[guess][1] += 1
            self.sim_seconds += cpu
            self.programs[shape] = t
            if self.record is not None:
                self.record(shape, t)
        elif t is None and self._speculated(shape):
            return self._simulated(shape)
        elif t is None:
            t0 = time.process_time()
            t = float(self.simulate(shape))
            dt = time.process_time() - t0
            self.sim_seconds += dt
            self.local_seconds += dt
            self.programs[shape] = t
        return t

    def _speculated(self, shape: Shape) -> bool:
        """Simulate `shape` and the chain's next missing midpoints side by side, all into
        `spare`; False (nothing done) when there is nothing to run beside it."""
        chain, self._chain = self._chain, []  # told for this midpoint only
        if self.speculate is None or not chain or chain[0] != shape:
            return False
        batch = [shape] + [s for s in chain[1:] if not self._simulated_or_known(s)
                           ][:self.width - 1]
        fill = self._fill(batch)
        if len(batch) + len(fill) < 2:
            return False
        self._ahead_of(batch, fill)
        return True

    def _simulated_or_known(self, shape: Shape) -> bool:
        """`shape` is simulated, simulated ahead or in `cached`: nothing to run for it."""
        return shape in self.programs or shape in self.spare or self._known(shape)

    def _next_shapes(self, programs: list[Shape]) -> list[tuple[str, Shape]]:
        """(guess, shape) of the shapes the decode program of `programs` takes in the next
        steps, the guess asked for most often so far first: one sequence more (up to
        `max_batch`), one fewer, and its past tokens past the next edge."""
        out: list[tuple[str, Shape]] = []
        for b, new, past in programs:
            if new != 1:
                continue
            if self.max_batch is None or b < self.max_batch:
                out.append(("more", (b + 1, 1, past)))
            if b > 1:
                out.append(("fewer", (b - 1, 1, past)))
            hi = edges_within((b, 1, past), 2, self.per_octave, self.context)[1]
            if self.context is None or hi + 2 <= self.context:
                out.append(("later", (b, 1, hi + 1)))

        def likelihood(guess: str) -> float:
            filled, asked = self.guesses[guess]
            return (asked + 1) / (filled + 2)

        return sorted(out, key=lambda gs: -likelihood(gs[0]))  # stable: ties keep order

    def _fill(self, batch: list[Shape]) -> list[Shape]:
        """Programs the next steps may ask for, to run beside `batch` on the workers it
        leaves idle (module docstring); none without a pool."""
        idle = -len(batch) % self.width if self.speculate is not None else 0
        out: list[Shape] = []
        for guess, near in self._next_shapes(self._step) if idle else ():
            for s in first_asked(near, self.per_octave, self.context):
                if s not in batch and s not in out and not self._simulated_or_known(s):
                    out.append(s)
                    self._guessed[s] = guess
                    self.guesses[guess][0] += 1
                    if len(out) == idle:
                        return out
        return out

    def _ahead_of(self, batch: list[Shape], fill: list[Shape]) -> None:
        """Simulate `batch` and `fill` side by side, into `spare`; a program of `fill`
        that fails is dropped (it was never asked for)."""
        assert self.speculate is not None
        for s, res in zip(batch + fill, self.speculate(batch + fill, len(fill)), strict=True):
            if res is not None:
                self.spare[s] = (float(res[0]), res[1])

    def _known(self, shape: Shape) -> bool:
        """`cached` knows `shape`: nothing to simulate ahead for it."""
        return self.cached is not None and self.cached(shape) is not None

    def _prefetch(self, shapes: list[Shape]) -> None:
        for s in sorted({s for s in shapes if s in self.spare}):
            self._simulated(s)  # simulated ahead already: used from there
        missing = sorted({s for s in shapes if s not in self.programs})
        if self.simulate_many is None or not missing:
            return
        todo = [s for s in missing if not self._known(s)]
        fill = self._fill(todo) if todo else []
        if len(missing) + len(fill) < 2:
            return
        if fill:  # the missing programs are used at once, the fill stays ahead
            self._ahead_of(todo, fill)
            for s in missing:
                self._simulated(s)
            return
        for shape, (t, cpu) in zip(missing, self.simulate_many(missing), strict=True):
            self.programs[shape] = float(t)
            self.sim_seconds += cpu
