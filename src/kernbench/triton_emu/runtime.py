"""Device buffers, `@jit`, launch and the greenlet KernelRunner (ADR-0020 D3).

Launch = pass 1 + pass 2:
1. Pass 1 (timing + memory data). Grid programs map onto PEs: program i (row-major over
   the grid, axis 0 fastest) runs on PE i mod P, where P = the topology's PE count (or
   `pes=`). Each PE is one SimPy process running its programs one after another, each
   program in its own greenlet. A tl call switches to the PE's process with a request;
   the process submits a PeCommand (DmaRead / DmaWrite / GemmCmd / MathCmd whose work
   stage carries the "data" dict) with `sim.submit(pe, cmd)`:
   - tl.load waits for its DMA and returns real data read from the MemoryStore;
   - compute ops (pe_math / pe_gemm) are issued without waiting; a later command waits
     only for the producers of its operands (in-order issue with a scoreboard), so DMA
     overlaps compute; tl.composite results are not tracked (tl.wait is needed);
   - tl.store is asynchronous; a later tl.load of the same program waits for it; the
     pass-1 store is updated at issue (ADR visibility = issue) when the value is real.
   TCM buffers come from the PE's PeMemAllocator and are freed when the last tl value
   using them dies and the commands reading them have completed.
2. Pass 2: DataExecutor runs the op log on a snapshot of the memory taken before pass 1;
   the device buffers then hold the results (`buf.numpy()`).
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernbench.numerics.dtypes import bits, canon, nbytes_of, np_dtype
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.triton_emu import language as L
from kernbench.triton_emu.language import KernelError

# ---------------------------------------------------------------------- device

HBM_SPACE = 1 << 40
_ALIGN = 256


class Device:
    """The simulated device memory: HBM contents that persist across launches."""

    def __init__(self) -> None:
        self.store = MemoryStore({"hbm": HBM_SPACE})
        self.next_addr = 0
        self.count = 0

    def alloc(self, nbytes: int) -> int:
        addr = self.next_addr
        self.next_addr += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        return addr

    def reset(self) -> None:
        self.__init__()


DEVICE = Device()


class DeviceBuffer:
    """A tensor in simulated HBM. Pass it to a kernel as a pointer; `.numpy()` reads it."""

    def __init__(self, shape: Any, dtype: Any, name: str = "", replicate: bool = False) -> None:
        #: a read-only input the host also copies into every cube's HBM (same offset):
        #: loads use the copy in the loading PE's cube
        self.replicate = replicate
        self.shape = (int(shape),) if isinstance(shape, int | np.integer) else tuple(
            int(s) for s in shape)
        self.dtype = canon(dtype)
        self.numel = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = nbytes_of(self.shape, self.dtype)
        self.addr = DEVICE.alloc(self.nbytes)
        DEVICE.count += 1
        self.name = name or f"buf{DEVICE.count}"

    def pointer(self) -> L.Tensor:
        return L.Tensor("pointer", (), self.dtype, np.int64(self.addr), ptr_buf=self)

    def numpy(self) -> np.ndarray:
        return np.array(DEVICE.store.read("hbm", self.addr, self.shape, self.dtype))

    def stride(self, dim: int | None = None) -> Any:
        st = tuple(int(np.prod(self.shape[i + 1:], dtype=np.int64)) for i in range(len(self.shape)))
        return st if dim is None else st[dim]

    def element_size(self) -> int:
        return np_dtype(self.dtype).itemsize

    def numel_(self) -> int:
        return self.numel

    def __repr__(self) -> str:
        return f"<DeviceBuffer {self.name} {list(self.shape)} {self.dtype} @hbm:{self.addr:#x}>"


def to_device(array: Any, name: str = "", replicate: bool = False) -> DeviceBuffer:
    """Copy `array` into simulated HBM. With `replicate=True` the host also deploys it into
    every cube (the buffer is then read-only for kernels: loads read their own cube's copy,
    so a PE on cube 3 does not cross UCIe to reach it)."""
    a = np.ascontiguousarray(np.array(array))
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    b = DeviceBuffer(a.shape, a.dtype, name, replicate)
    DEVICE.store.write("hbm", b.addr, a.copy())
    return b


def empty(shape: Any, dtype: Any = "float32", name: str = "") -> DeviceBuffer:
    """A zero-filled device buffer (reads of it are defined, unlike torch.empty)."""
    b = DeviceBuffer(shape, dtype, name)
    DEVICE.store.write_bytes("hbm", b.addr, np.zeros(b.nbytes, np.uint8))
    return b


def zeros(shape: Any, dtype: Any = "float32", name: str = "") -> DeviceBuffer:
    return empty(shape, dtype, name)


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


next_power_of_2 = L.next_power_of_2


# ---------------------------------------------------------------------- jit


# tl operations one launch may run (each op makes a tl tensor); the bundled benches use
# under 10 000. Ends a kernel that loops forever on tl ops (docs/errors.md).
DEFAULT_MAX_OPS = 5_000_000


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


# ---------------------------------------------------------------------- runner


class TcmBuf:
    __slots__ = ("pe", "addr", "nbytes", "ready", "events", "box", "__weakref__")

    def __init__(self, pe: str, addr: int, nbytes: int) -> None:
        self.pe = pe
        self.addr = addr
        self.nbytes = nbytes
        self.ready: Any = None  # producer's done event (None: ready / untracked)
        self.events: list[Any] = []  # every command touching it (free waits for them)
        self.box: list[int] = [addr]  # shared with the finalizer; -1 once freed


@dataclass
class LaunchResult:
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


class Program:
    """One grid program: its greenlet's view of the runner (tl calls `request`)."""

    def __init__(self, runner: KernelRunner, pe: Any, pid: tuple[int, ...], index: int) -> None:
        self.runner = runner
        self.pe = pe
        self.pid = pid
        self.grid = runner.grid
        self.index = index
        self.greenlet: Any = None
        self.outstanding: list[Any] = []
        self.stores: list[Any] = []
        self.bufs: list[weakref.ref] = []

    def request(self, kind: str, **spec: Any) -> Any:
        return self.runner.main.switch((kind, spec))


class KernelRunner:
    def __init__(self, sim: Any, kernel: JITFunction, grid: tuple[int, ...], args: tuple,
                 meta: dict[str, Any], store: MemoryStore, pes: list[Any],
                 max_ops: int = 0) -> None:  # fmt: skip
        import greenlet

        self.ops = 0  # tl operations so far, over all programs (language.Tensor counts)
        self.max_ops = max_ops or DEFAULT_MAX_OPS
        self.greenlet_mod = greenlet
        self.main = greenlet.getcurrent()
        self.sim = sim
        self.env = sim.env
        self.kernel = kernel
        self.grid = grid
        self.args = tuple(a.pointer() if isinstance(a, DeviceBuffer) else a for a in args)
        self.meta = meta
        self.store = store
        self.pes = pes
        self.alloc = {p.id: sim.components[f"{p.id}.pe_tcm"].allocator for p in pes}
        self.deferred: dict[str, list[tuple[int, list[Any]]]] = {p.id: [] for p in pes}
        self.pending_hbm: list[tuple[int, int]] = []
        self.commands: list[Any] = []
        self.seq = 0

    # ---------------------------------------------------------------- processes
    def start(self) -> None:
        n = int(np.prod(self.grid))
        per_pe: dict[int, list[int]] = {}
        for i in range(n):
            per_pe.setdefault(i % len(self.pes), []).append(i)
        for k in sorted(per_pe):
            self.env.process(self._pe_proc(self.pes[k], per_pe[k]))

    def _pid(self, i: int) -> tuple[int, int, int]:
        g = list(self.grid) + [1] * (3 - len(self.grid))
        return (i % g[0], (i // g[0]) % g[1], i // (g[0] * g[1]))

    def _pe_proc(self, pe: Any, programs: list[int]):  # noqa: ANN202 - SimPy process
        for i in programs:
            prog = Program(self, pe, self._pid(i), i)
            g = self.greenlet_mod.greenlet(self._run_kernel)
            prog.greenlet = g
            msg = self._switch(prog, prog)
            while not g.dead:
                kind, spec = msg
                result = yield from getattr(self, f"_do_{kind}")(prog, **spec)
                msg = self._switch(prog, result)
            yield from self._finish(prog)

    def _switch(self, prog: Program, value: Any) -> Any:
        L._CTX[0] = prog
        try:
            return prog.greenlet.switch(value)
        finally:
            L._CTX[0] = None

    def _run_kernel(self, prog: Program) -> None:
        fn = self.kernel.fn
        try:
            fn(*self.args, **self.meta)
        except BaseException as e:
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_code is not fn.__code__:
                tb = tb.tb_next
            if tb is not None:
                e.__traceback__ = tb
            e._kernbench_kernel = True  # type: ignore[attr-defined]
            raise

    def _finish(self, prog: Program):  # noqa: ANN202
        evs = [e for e in prog.outstanding if not e.triggered]
        if evs:
            yield self.env.all_of(evs)
        alloc = self.alloc[prog.pe.id]
        for ref in prog.bufs:
            b = ref()
            if b is not None and b.box[0] >= 0:
                alloc.free(b.addr)
                b.box[0] = -1
        self._reclaim(prog.pe.id, force=True)

    # ---------------------------------------------------------------- TCM
    def _on_dead(self, pe: str, addr_box: list[int], events: list[Any]) -> None:
        if addr_box[0] >= 0:
            self.deferred[pe].append((addr_box[0], events))

    def _reclaim(self, pe: str, force: bool = False) -> None:
        keep = []
        alloc = self.alloc[pe]
        for addr, evs in self.deferred[pe]:
            if force or all(e.triggered for e in evs):
                with contextlib.suppress(KeyError):  # freed at program end already
                    alloc.free(addr)
            else:
                keep.append((addr, evs))
        self.deferred[pe] = keep

    def _alloc(self, prog: Program, nbytes: int, line: str):  # noqa: ANN202
        from kernbench.errors import CapacityError

        pe = prog.pe.id
        alloc = self.alloc[pe]
        self._reclaim(pe)
        while True:
            try:
                addr = alloc.alloc(max(nbytes, 1), line)
                break
            except CapacityError:
                waiting = [e for _, evs in self.deferred[pe] for e in evs if not e.triggered]
                if not waiting:
                    raise KernelError(
                        f"{line}: TCM overflow on {pe}: this value needs {nbytes} bytes, "
                        f"{alloc.free_bytes()} of {alloc.limit} allocatable bytes are free "
                        f"(live tl values hold the rest; use smaller blocks)"
                    ) from None
                yield self.env.any_of(waiting)
                self._reclaim(pe)
        buf = TcmBuf(pe, addr, nbytes)
        box = [addr]
        fin = weakref.finalize(buf, self._on_dead, pe, box, buf.events)
        fin.atexit = False
        prog.bufs.append(weakref.ref(buf))
        buf.box = box
        return buf, box

    # ---------------------------------------------------------------- helpers
    def _wait_bufs(self, bufs: list[Any]):  # noqa: ANN202
        evs = [b.ready for b in bufs if b is not None and b.ready is not None
               and not b.ready.triggered]
        if evs:
            yield self.env.all_of(evs)

    def _label(self, prog: Program, what: str, line: str) -> str:
        return f"{self.kernel.__name__}#{prog.index} {what} {line.rsplit('/', 1)[-1]}"

    def _submit(self, prog: Program, cmd: Any) -> Any:
        self.commands.append(cmd)
        done = self.sim.submit(prog.pe, cmd)
        prog.outstanding.append(done)
        if len(prog.outstanding) > 64:
            prog.outstanding = [e for e in prog.outstanding if not e.triggered]
        return done

    def _tcm(self, prog: Program) -> str:
        return f"tcm:{prog.pe.id}"

    # ---------------------------------------------------------------- requests
    def _do_load(self, prog: Program, addrs: Any, mask: Any, other: Any, dtype: str,
                 shape: tuple, line: str, ptr: Any):  # noqa: ANN202
        from kernbench.common.pe_commands import DmaRead
        from kernbench.sim_engine.executor import gather

        evs = [e for e in prog.stores if not e.triggered]
        if evs:
            yield self.env.all_of(evs)
        prog.stores = []
        nbytes = nbytes_of(shape, dtype)
        buf, box = yield from self._alloc(prog, nbytes, line)
        addrs = np.broadcast_to(np.asarray(addrs, np.int64), shape)
        on = addrs if mask is None else addrs[mask]
        first = int(on.min()) if on.size else int(ptr.ptr_buf.addr if ptr.ptr_buf else 0)
        src = getattr(ptr, "ptr_buf", None)
        timing_addr = first + (prog.pe.cube.hbm_base if src is not None and src.replicate
                               else 0)
        flat = addrs.reshape(-1)
        isz = np_dtype(dtype).itemsize
        rows = int(np.count_nonzero(np.diff(flat) != isz)) + 1 if flat.size > 1 else 1
        data = {"op_kind": "memory", "op_name": "gather", "src_space": "hbm",
                "addrs": addrs, "mask": mask, "other": other, "dtype": dtype,
                "shape": tuple(shape), "dst_space": self._tcm(prog), "dst_addr": buf.addr}
        cmd = DmaRead(label=self._label(prog, "load", line), params={
            "nbytes": max(nbytes, 1), "addr": timing_addr, "space": "hbm", "rows": rows,
            "data": data})
        done = self._submit(prog, cmd)
        buf.events.append(done)
        yield done
        lo, hi = (int(on.min()), int(on.max()) + isz) if on.size else (0, 0)
        pending = any(a < hi and lo < b for a, b in self.pending_hbm)
        if pending:
            buf.ready = done
            return buf, None
        vals = gather(self.store, "hbm", addrs, dtype, mask, other)
        return buf, vals

    def _do_store(self, prog: Program, addrs: Any, mask: Any, value: dict, dtype: str,
                  shape: tuple, line: str, real: Any):  # noqa: ANN202
        from kernbench.common.pe_commands import DmaWrite
        from kernbench.sim_engine.executor import scatter

        vbuf = value["buf"]
        yield from self._wait_bufs([vbuf])
        addrs = np.broadcast_to(np.asarray(addrs, np.int64), shape)
        isz = np_dtype(dtype).itemsize
        sel = addrs if mask is None else addrs[mask]
        if real is not None:
            vals = np.broadcast_to(real, shape)
            vsel = vals if mask is None else vals[mask]
            scatter(self.store, "hbm", sel.reshape(-1), np.asarray(vsel).reshape(-1), dtype)
        elif sel.size:
            self.pending_hbm.append((int(sel.min()), int(sel.max()) + isz))
        data = {"op_kind": "memory", "op_name": "scatter", "dtype": dtype, "shape": tuple(shape),
                "dst_space": "hbm", "addrs": addrs, "mask": mask}
        if vbuf is not None:
            data.update(src_space=self._tcm(prog), src_addr=vbuf.addr)
        else:
            data.update(src_space=self._tcm(prog), src_addr=None, values=value["imm"])
        flat = addrs.reshape(-1)
        rows = int(np.count_nonzero(np.diff(flat) != isz)) + 1 if flat.size > 1 else 1
        first = int(sel.min()) if sel.size else int(flat[0])
        cmd = DmaWrite(label=self._label(prog, "store", line), params={
            "nbytes": max(nbytes_of(shape, dtype), 1), "addr": first, "space": "hbm",
            "rows": rows, "data": data})
        done = self._submit(prog, cmd)
        prog.stores.append(done)
        if vbuf is not None:
            vbuf.events.append(done)
        return None

    def _inputs(self, ops: list[dict]) -> tuple[list, list, list, list]:
        addrs, shapes, dts, imms = [], [], [], []
        for o in ops:
            b = o["buf"]
            addrs.append(None if b is None else b.addr)
            shapes.append(tuple(o["shape"]))
            dts.append(o["dtype"])
            imms.append(None if b is not None else o["imm"])
        return addrs, shapes, dts, imms

    def _do_math(self, prog: Program, op: str, inputs: list[dict], shape: tuple, dtype: str,
                 attrs: dict, line: str, length: int, untracked: bool = False):  # noqa: ANN202
        from kernbench.common.pe_commands import MathCmd

        bufs = [o["buf"] for o in inputs]
        yield from self._wait_bufs(bufs)
        nbytes = nbytes_of(shape, dtype)
        out, box = yield from self._alloc(prog, nbytes, line)
        addrs, shapes, dts, imms = self._inputs(inputs)
        data = {"op_kind": "math", "op_name": op, "op": op, "space": self._tcm(prog),
                "input_addrs": addrs, "input_shapes": shapes, "input_dtypes": dts,
                "imm": imms, "dst_addr": out.addr, "shape_out": tuple(shape), "dtype": dtype,
                **attrs}
        if op == "cast":
            data["dtype"] = dtype
        fetch = sum(nbytes_of(o["shape"], o["dtype"]) for o in inputs if o["buf"] is not None)
        cmd = MathCmd(label=self._label(prog, op, line), fetch_nbytes=fetch, store_nbytes=nbytes,
                      params={"op": _COST_OP.get(op, op), "length": max(int(length), 1),
                              "rows": 1, "data": data})
        done = self._submit(prog, cmd)
        for b in bufs:
            if b is not None:
                b.events.append(done)
        out.events.append(done)
        if untracked:
            return out, done
        out.ready = done
        return out

    def _do_gemm(self, prog: Program, a: dict, b: dict, acc: dict | None, shape: tuple,
                 dtype: str, line: str, wait: bool):  # noqa: ANN202
        from kernbench.common.pe_commands import GemmCmd

        bufs = [a["buf"], b["buf"]] + ([acc["buf"]] if acc else [])
        yield from self._wait_bufs(bufs)
        nbytes = nbytes_of(shape, dtype)
        out, box = yield from self._alloc(prog, nbytes, line)
        m, k = a["shape"]
        n = b["shape"][1]
        data = {"op_kind": "gemm", "op_name": "dot", "space": self._tcm(prog),
                "src_a_addr": a["buf"].addr, "src_b_addr": b["buf"].addr, "dst_addr": out.addr,
                "shape_a": tuple(a["shape"]), "shape_b": tuple(b["shape"]),
                "shape_out": tuple(shape), "dtype_a": a["dtype"], "dtype_b": b["dtype"],
                "dtype_acc": "int32" if np_dtype(dtype).kind in "iu" else "float32",
                "dtype_out": dtype, "transpose_a": False, "transpose_b": False}
        fetch = nbytes_of(a["shape"], a["dtype"]) + nbytes_of(b["shape"], b["dtype"])
        if acc is not None:
            data["acc_addr"] = acc["buf"].addr
            data["dtype_c"] = acc["dtype"]
            fetch += nbytes_of(acc["shape"], acc["dtype"])
        cmd = GemmCmd(label=self._label(prog, "dot", line), fetch_nbytes=fetch,
                      store_nbytes=nbytes, params={
                          "m": int(m), "n": int(n), "k": int(k),
                          "qbits_weight": bits(b["dtype"]), "qbits_activation": bits(a["dtype"]),
                          "data": data})
        done = self._submit(prog, cmd)
        for x in bufs:
            if x is not None:
                x.events.append(done)
        out.events.append(done)
        if wait:
            out.ready = done
        return out, done

    def _do_wait(self, prog: Program, handle: Any):  # noqa: ANN202
        if not handle.done.triggered:
            yield handle.done
        return None


_COST_OP = {
    "maximum": "max", "minimum": "min", "neg": "sub", "abs": "max", "less": "sub",
    "less_equal": "sub", "greater": "sub", "greater_equal": "sub", "equal": "sub",
    "not_equal": "sub", "and": "mul", "or": "add", "xor": "add", "not": "sub", "mod": "div",
    "floor": "cast", "ceil": "cast", "sin": "exp", "cos": "exp", "reciprocal": "div",
    "argmax": "reduce_max", "argmin": "reduce_min", "broadcast": "copy", "reshape": "copy",
    "const": "copy", "dequantize": "quantize", "dequant_scale": "requantize",
}  # fmt: skip


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
    from kernbench.report.perfetto import build_trace
    from kernbench.report.stats import collect_stats
    from kernbench.sim_engine.engine import Simulator
    from kernbench.sim_engine.executor import DataExecutor
    from kernbench.sim_engine.op_log import OpLogger
    from kernbench.topology import Topology, load_topology

    topo = topology if isinstance(topology, Topology) else load_topology(topology or "small")
    g = _grid_of(grid, meta)
    all_pes = topo.pes
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
    """Roofline bound in ns: max(flops / peak, bytes / HBM bandwidth).

    Peak = 2 × rows × cols × throughput factor × clock over the PEs used; HBM bandwidth is
    that of `cubes` cubes (device buffers are allocated from address 0, i.e. in cube 0)."""
    cfg = topology.config
    gm = cfg.cube.pe_template.pe_gemm
    n = pes or len(topology.pes)
    peak = 2 * gm.rows * gm.cols * gm.throughput_factor.get(bits_, 1.0) * gm.clock_ghz * n
    h = cfg.cube.hbm_ctrl
    bw = min(h.channels * h.channel_bw_gbs, h.port_bw_gbs * cfg.cube.mesh.rows *
             cfg.cube.mesh.cols) * cubes
    t_c = flops / peak
    t_m = hbm_bytes / bw
    return {"compute_ns": t_c, "memory_ns": t_m, "bound_ns": max(t_c, t_m),
            "peak_flops_per_ns": peak, "hbm_gbs": bw}
