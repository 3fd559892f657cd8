"""Step programs simulated side by side (`kernbench serve --workers N`).

Each program is a compile and a simulation of its own, independent of every other, and
its simulated time does not depend on the process that computes it. `ProgramPool(model,
topo, workers)` keeps `workers` spawn-context processes, each holding the model and the
topology once (the pool's initializer), and `simulate_many(shapes)` simulates a list of
program shapes on them, returning each one's (simulated ns, CPU s of the worker) in the
order asked. A worker that raises (an InputError: a step that does not fit the HBM)
raises the same error line here; a worker that dies raises RuntimeError.

Which programs are simulated is the caller's decision (`StepTimer`'s prefetch: only
shapes the bucket rule asks for anyway), so the outputs are the same for any number of
workers.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from kernbench.common.tuning import tune_process
from kernbench.errors import warn_each_once
from kernbench.host.serve.model import ServedModel
from kernbench.topology.model import Topology

Shape = tuple[int, int, int]

_WORKER: tuple[ServedModel, Topology] | None = None


def _init(model: ServedModel, topo: Topology) -> None:
    global _WORKER
    _WORKER = (model, topo)
    tune_process()  # a spawned interpreter has Python's defaults, not the console script's
    warn_each_once()  # every program is the same model's: its warnings once a worker


def _simulate(shape: Shape) -> tuple[float, float]:
    assert _WORKER is not None, "ProgramPool's initializer did not run"
    model, topo = _WORKER
    t0 = time.process_time()
    ns = model.simulate(shape, topo)
    return ns, time.process_time() - t0


class ProgramPool:
    """`workers` processes simulating step programs of `model` on `topo` (a context
    manager: leaving it stops them)."""

    def __init__(self, model: ServedModel, topo: Topology, workers: int) -> None:
        # spawn: a clean interpreter per worker (no forked SimPy/numpy state)
        ctx = multiprocessing.get_context("spawn")
        self.workers = workers
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                         initializer=_init, initargs=(model, topo))

    def simulate_many(self, shapes: list[Shape], optional: int = 0
                      ) -> list[tuple[float, float] | None]:
        """(ns, CPU s) of each of `shapes`, in order; None for one of the last `optional`
        (programs simulated ahead, which nobody asked for yet) whose simulation raised."""
        futures = [self._pool.submit(_simulate, s) for s in shapes]
        out: list[tuple[float, float] | None] = []
        for i, f in enumerate(futures):
            try:
                out.append(f.result())
            except BrokenProcessPool as e:
                raise RuntimeError(f"a step-program worker died ({e})") from None
            except Exception:
                if i < len(futures) - optional:
                    raise
                out.append(None)  # not asked for: its error is nobody's
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ProgramPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
