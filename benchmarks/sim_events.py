"""SimPy events per CMDQ entry by what they run: the event loop's callbacks counted on one
of benchmarks/sim_speed.py's GPT-2 cases (compiled to a bundle on `base`, simulated timing
only). A grant of the arbiter is not an event; it is counted on a line of its own.

    .venv/bin/python benchmarks/sim_events.py --case g2s-prefill
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


def main() -> None:
    from sim_speed import GPT2

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="g2s-prefill", choices=sorted(GPT2))
    a = ap.parse_args()
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
