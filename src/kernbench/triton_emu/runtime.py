"""`@jit`, launch and the kernel roofline: the front end's runtime.

Launch = pass 1 + pass 2:
1. Pass 1 (timing + memory data): the KernelRunner (runner.py) runs the grid's programs
   as greenlets inside the simulator; tl calls become PE commands.
2. Pass 2: DataExecutor runs the op log on a snapshot of the memory taken before pass 1;
   the device buffers then hold the results (`buf.numpy()`).
Device buffers (DEVICE, to_device, empty, zeros) live in device.py and are re-exported
here, the module benchmarks and tests import them from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernbench.report.perfetto import build_trace
from kernbench.report.stats import collect_stats
from kernbench.sim_engine.engine import Simulator
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.op_log import OpLogger
from kernbench.topology import Topology, load_topology, peaks
from kernbench.triton_emu.context import KernelError
from kernbench.triton_emu.device import DEVICE, DeviceBuffer, cdiv, empty, to_device, zeros
from kernbench.triton_emu.ops import next_power_of_2
from kernbench.triton_emu.runner import DEFAULT_MAX_OPS, KernelRunner

__all__ = [
    "DEVICE", "Config", "DeviceBuffer", "JITFunction", "KernelRunner", "LaunchResult",
    "autotune", "cdiv", "empty", "heuristics", "jit", "launch", "next_power_of_2", "roofline",
    "to_device", "zeros",
]  # fmt: skip

# ---------------------------------------------------------------------- jit


class JITFunction:
    """`@kernbench.jit`: call it inside a kernel (a helper) or launch it: kernel[grid](...)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kw: Any) -> Any:
        return self.fn(*args, **kw)

    def __getitem__(self, grid: Any) -> Callable[..., LaunchResult]:
        def launcher(*args: Any, topology: Any = None, pes: int | None = None,
                     data_pass: bool = True, trace: bool = True,
                     max_ops: int = DEFAULT_MAX_OPS, **meta: Any) -> LaunchResult:
            return launch(self, grid, args, meta, topology=topology, pes=pes,
                          data_pass=data_pass, trace=trace, max_ops=max_ops)

        return launcher

    def run(self, *args: Any, grid: Any, **kw: Any) -> LaunchResult:
        return self[grid](*args, **kw)


def jit(fn: Callable[..., Any] | None = None, **_: Any) -> Any:
    if fn is None:
        return lambda f: JITFunction(f)
    return JITFunction(fn)


class Config:
    """triton.Config stand-in (autotuning is not simulated: the first config is used)."""

    def __init__(self, kwargs: dict[str, Any], num_warps: int = 4, num_stages: int = 2,
                 **_: Any) -> None:  # fmt: skip
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages


def autotune(configs: list[Config], key: Any = None, **_: Any) -> Callable[[Any], Any]:
    def deco(jf: Any) -> Any:
        jf = jf if isinstance(jf, JITFunction) else JITFunction(jf)
        cfg = configs[0].kwargs if configs else {}

        class _Tuned(JITFunction):
            def __getitem__(self, grid: Any) -> Callable[..., LaunchResult]:
                inner = JITFunction.__getitem__(self, grid)
                return lambda *a, **kw: inner(*a, **{**cfg, **kw})

        return _Tuned(jf.fn)

    return deco


def heuristics(values: dict[str, Callable[[dict[str, Any]], Any]]) -> Callable[[Any], Any]:
    def deco(jf: Any) -> Any:
        jf = jf if isinstance(jf, JITFunction) else JITFunction(jf)
        return jf

    return deco


@dataclass
class LaunchResult:
    """What a launch returns: simulated time, stats, trace, and the run's objects."""

    kernel: str
    grid: tuple[int, ...]
    total_ns: float
    stats: dict[str, Any]
    trace: dict[str, Any] | None
    sim: Any
    op_log: Any
    commands: int
    pes_used: int
    pass1_s: float
    pass2_s: float
    extra: dict[str, Any] = field(default_factory=dict)

# ---------------------------------------------------------------------- launch


def _grid_of(grid: Any, meta: dict[str, Any]) -> tuple[int, ...]:
    g = grid(dict(meta)) if callable(grid) else grid
    if isinstance(g, int | np.integer):
        g = (g,)
    g = tuple(int(x) for x in g)
    if not g or len(g) > 3 or any(x < 0 for x in g):
        raise KernelError(f"grid must be 1 to 3 non-negative ints, got {g}")
    return g


def launch(kernel: JITFunction, grid: Any, args: tuple, meta: dict[str, Any], *,
           topology: Any = None, pes: int | None = None, data_pass: bool = True,
           trace: bool = True, max_ops: int = 0) -> LaunchResult:  # fmt: skip
    """Run `kernel` over `grid` on the simulated NPU (pass 1) and the data pass (pass 2).

    `max_ops` (default DEFAULT_MAX_OPS) bounds the tl operations of the whole launch: a
    kernel that loops forever ends with a KernelError (exit 2) instead of hanging."""
    topo = topology if isinstance(topology, Topology) else load_topology(topology or "small")
    g = _grid_of(grid, meta)
    all_pes = topo.pes
    if pes is not None and not 1 <= pes <= len(all_pes):
        raise KernelError(f"pes={pes}: want 1..{len(all_pes)} (the PEs of '{topo.name}'), "
                          "or None for all of them")
    use = all_pes[: pes] if pes else all_pes
    if not use:
        raise KernelError("no PEs to run on")
    for a in args:
        if isinstance(a, DeviceBuffer) and a.addr + a.nbytes > topo.hbm_bytes:
            raise KernelError(f"buffer {a.name} at {a.addr:#x} is beyond the "
                              f"{topo.hbm_bytes:#x}-byte HBM of '{topo.name}'")
    store = DEVICE.store
    tcm = topo.config.cube.pe_template.pe_tcm.capacity_kib * 1024
    for p in all_pes:
        store.add_space(f"tcm:{p.id}", tcm)  # TCM contents do not outlive a launch
    init = store.snapshot() if data_pass else None
    logger = OpLogger() if data_pass else None
    sim = Simulator(topo, op_logger=logger, trace=trace)
    runner = KernelRunner(sim, kernel, g, args, meta, store, use, max_ops)
    t0 = time.perf_counter()
    runner.start()
    try:
        total = sim.run()
    except BaseException as e:
        # SimPy re-raises a copy of a process's exception, the original as __cause__
        orig = e.__cause__ if type(e.__cause__) is type(e) else e
        if getattr(orig, "_kernbench_kernel", False) or orig is not e:
            raise orig.with_traceback(orig.__traceback__) from None
        raise
    t1 = time.perf_counter()
    dp: dict[str, Any] = {}
    if data_pass:
        ex = DataExecutor(logger, init)
        ex.run()
        DEVICE.store = init
        dp = {"ops_executed": ex.executed, "gemms_batched": ex.batched,
              "forced_dependencies": ex.forced}
    t2 = time.perf_counter()
    programs = int(np.prod(g))
    extra = {"kernel": {"name": kernel.__name__, "grid": list(g), "programs": programs,
                        "pes": min(len(use), programs), "commands": len(runner.commands),
                        "ops_logged": len(logger) if logger else 0, "data_pass": dp}}
    stats = collect_stats(sim, total, extra)
    tr = build_trace(sim, runner.commands) if trace else None
    return LaunchResult(kernel.__name__, g, total, stats, tr, sim, logger, len(runner.commands),
                        min(len(use), programs), t1 - t0, t2 - t1, dp)


def roofline(topology: Any, flops: float, hbm_bytes: float, bits_: int = 16,
             pes: int | None = None, cubes: int = 1) -> dict[str, float]:  # fmt: skip
    """Roofline bound in ns: max(flops / peak, bytes / HBM bandwidth) (topology.peaks).

    Peak = 2 × rows × cols × throughput factor × clock over the PEs used; HBM bandwidth is
    that of `cubes` cubes as the mesh's HBM ports can draw it (device buffers are allocated
    from address 0, i.e. in cube 0)."""
    peak = peaks.flops_per_ns(topology, bits_, pes or None)
    bw = peaks.hbm_port_limited_gbs(topology, cubes)
    r = peaks.roofline(flops, hbm_bytes, peak, bw)
    return {"compute_ns": r.compute_ns, "memory_ns": r.memory_ns, "bound_ns": r.bound_ns,
            "peak_flops_per_ns": peak, "hbm_gbs": bw}
