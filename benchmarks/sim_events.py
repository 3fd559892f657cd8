"""SimPy events per CMDQ entry by what they run: the event loop's callbacks counted on one
of benchmarks/sim_speed.py's GPT-2 cases (compiled to a bundle on `base`, simulated timing
only). A grant of the arbiter is not an event; it is counted on a line of its own.

    .venv/bin/python benchmarks/sim_events.py --case g2s-prefill
    .venv/bin/python benchmarks/sim_events.py --floor 1000000

`--floor N` times the event mechanism alone instead: N events scheduled one after the other
with `arbiter.call_after` on a `GrantingEnvironment`, each callback scheduling the next
(a schedule, a pop and one callback per event, no model work): events per second, the
floor under which no per-entry cost of the simulator can go on its events.
    PYTHONPATH=/path/to/old/src .venv/bin/python benchmarks/sim_events.py   # another tree
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from heapq import heappop
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _name(cb: object) -> str:
    fn = getattr(cb, "__func__", cb)
    return getattr(fn, "__qualname__", type(cb).__name__)


def counting_run(counts: collections.Counter):  # noqa: ANN201
    """A `GrantingEnvironment.run` (without `until`) that counts each event by its class
    and its callbacks' names, and each grant."""

    def run(self, until=None):  # noqa: ANN001, ANN202, ARG001
        arbiter = self.arbiter
        queue = self._queue
        while True:
            if arbiter.pending and (not queue or queue[0][0] > self._now):
                counts["(grant, not an event)"] += 1
                arbiter.grant()
                continue
            if not queue:
                return None
            self._now, _, _, event = heappop(queue)
            callbacks, event.callbacks = event.callbacks, None
            counts[f"{type(event).__name__}: " + ", ".join(map(_name, callbacks))] += 1
            for cb in callbacks:
                cb(event)
            if not event._ok and not hasattr(event, "_defused"):
                raise event._value

    return run


def floor(n: int) -> None:
    """`--floor`: n trivial events through the simulator's environment, timed."""
    import time

    from kernbench.components.arbiter import call_after
    from kernbench.components.environment import GrantingEnvironment

    env = GrantingEnvironment()
    left = [n]

    def tick(_ev: object) -> None:
        left[0] -= 1
        if left[0]:
            call_after(env, 1.0, tick)

    call_after(env, 1.0, tick)
    t0 = time.perf_counter()
    env.run()
    dt = time.perf_counter() - t0
    print(f"{n:,} events in {dt:.3f} s: {n / dt:,.0f} events/s, {1e6 * dt / n:.2f} µs each")


def main() -> None:
    from sim_speed import GPT2

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="g2s-prefill", choices=sorted(GPT2))
    ap.add_argument("--floor", type=int, default=None, metavar="N",
                    help="time N trivial events instead (the event mechanism alone)")
    a = ap.parse_args()
    if a.floor is not None:
        floor(a.floor)
        return
    import onnx

    import kernbench.components.arbiter as arbiter
    from kernbench.host.flow import TIMING_ONLY, compile_model, simulate_bundle
    from kernbench.models.builders import build_gpt2
    from kernbench.topology import load_topology

    counts: collections.Counter = collections.Counter()
    arbiter.GrantingEnvironment.run = counting_run(counts)
    topo = load_topology("base")
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model.onnx"
        onnx.save(build_gpt2(**GPT2[a.case]), str(model))
        compile_model(model, topo, Path(tmp) / "bundle")
        res = simulate_bundle(Path(tmp) / "bundle", topo, Path(tmp) / "out", TIMING_ONLY)
    n = res.stats["entry_count"]
    events = sum(v for k, v in counts.items() if not k.startswith("(grant"))
    print(f"{a.case}: {n:,} entries, {events:,} events ({events / n:.2f} per entry), "
          f"simulated {res.stats['total_ns']} ns")
    print("| per entry | count | event: callbacks |\n| ---: | ---: | --- |")
    for k, v in counts.most_common():
        print(f"| {v / n:.2f} | {v:,} | {k} |")


if __name__ == "__main__":
    main()
