"""Stage operations per second: the full PE component stack vs a bare SimPy pipeline.

Run:  .venv/bin/python benchmarks/sim_throughput.py [--tiles 20000] [--repeat 3]

Full stack: one composite GEMM command per PE of `small`, each tile passing
DMA_READ → FETCH → GEMM → STORE → DMA_WRITE through pe_scheduler's feeder, the engines'
inboxes, the fabric reservations (HBM channels, links, TCM port), tracing on.
Bare: three SimPy processes joined by Stores, each doing get → timeout → put.
Both count one "stage operation" per (token, stage) service. Best of `repeat` runs each,
measured in the same process; the ratio bare / stack is the cost of the component stack.
Both time the event loop alone: the bare pipeline's environment, stores and processes, and
the stack's simulator and commands (built by `host.scenarios.gemm_pipeline`), are made
before the clock starts. The last row times the stack's setup too, as this benchmark did
before 2026-11-27 (its ratio is not per stage operation: the bare row has no setup in it).
"""

from __future__ import annotations

import argparse
import time

import simpy

from kernbench.host.scenarios import gemm_pipeline
from kernbench.topology import load_topology


def bare_pipeline(items: int) -> tuple[int, float]:
    env = simpy.Environment()
    q = [simpy.Store(env, capacity=4) for _ in range(4)]

    def source():
        for i in range(items):
            yield q[0].put(i)

    def stage(inbox, outbox, delay):
        while True:
            x = yield inbox.get()
            yield env.timeout(delay)
            yield outbox.put(x)

    def sink():
        for _ in range(items):
            yield q[3].get()

    env.process(source())
    for i, d in enumerate((3, 5, 2)):
        env.process(stage(q[i], q[i + 1], d))
    env.process(sink())
    t0 = time.perf_counter()
    env.run()
    return items * 3, time.perf_counter() - t0


def component_stack(tiles: int, trace: bool, setup: bool = False) -> tuple[int, float]:
    """(stage operations, seconds of `sim.run()`; with `setup`, of building the simulator
    and the commands as well)."""
    topo = load_topology("small", ["cube.pe_template.pe_tcm.reserved_kib=1024"])
    per_pe = tiles // len(topo.pes)
    t0 = time.perf_counter()
    sim, _ = gemm_pipeline(topo, tiles=per_pe, tile_m=32, n=32, k=32, trace=trace)
    if not setup:
        t0 = time.perf_counter()
    sim.run()
    dt = time.perf_counter() - t0
    ops = sum(getattr(c, "ops", 0) for c in sim.components.values())
    return ops, dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    best = {}
    for name, fn in (
        ("bare SimPy 3-stage pipeline", lambda: bare_pipeline(args.tiles)),
        ("component stack, trace on", lambda: component_stack(args.tiles, True)),
        ("component stack, trace off", lambda: component_stack(args.tiles, False)),
        ("trace off, setup timed too", lambda: component_stack(args.tiles, False, True)),
    ):
        rates = []
        for _ in range(args.repeat):
            ops, dt = fn()
            rates.append(ops / dt)
        best[name] = (ops, max(rates))
    bare = best["bare SimPy 3-stage pipeline"][1]
    print(f"{'pipeline':32s} {'stage ops':>10s} {'ops/s':>12s} {'bare/this':>10s}")
    for name, (ops, rate) in best.items():
        print(f"{name:32s} {ops:10d} {rate:12,.0f} {bare / rate:10.2f}")


if __name__ == "__main__":
    main()
