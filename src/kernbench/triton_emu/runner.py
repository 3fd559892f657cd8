"""The greenlet KernelRunner: grid programs on PEs, tl requests → PE commands.

Grid programs map onto PEs: program i (row-major over the grid, axis 0 fastest) runs on
PE i mod P. Each PE is one SimPy process running its programs one after another, each
program in its own greenlet. A tl call switches to the PE's process with a request; the
process submits a PeCommand (DmaRead / DmaWrite / GemmCmd / MathCmd whose work stage
carries the "data" dict) with `sim.submit(pe, cmd)`:
- tl.load waits for its DMA and returns real data read from the MemoryStore;
- compute ops (pe_math / pe_gemm) are issued without waiting; a later command waits only
  for the producers of its operands (in-order issue with a scoreboard), so DMA overlaps
  compute; tl.composite results are not tracked (tl.wait is needed);
- tl.store is asynchronous; a later tl.load of the same program waits for it; the pass-1
  store is updated at issue (ADR visibility = issue) when the value is real.
TCM buffers come from the PE's PeMemAllocator and are freed when the last tl value using
them dies and the commands reading them have completed.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import greenlet
import numpy as np

from kernbench.common.pe_commands import DmaRead, DmaWrite, GemmCmd, MathCmd
from kernbench.errors import CapacityError
from kernbench.numerics.dtypes import bits, nbytes_of, np_dtype
from kernbench.sim_engine.executor import gather, scatter
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.triton_emu.context import CTX, KernelError
from kernbench.triton_emu.device import DeviceBuffer


class Kernel(Protocol):
    """What the runner needs of a launched kernel (`runtime.JITFunction` is one): the
    Python function every grid program runs, and its name for diagnostics."""

    fn: Callable[..., Any]
    __name__: str


class TcmBuf:
    """A TCM allocation holding one tl value, with the events that must finish before it
    is freed."""

    __slots__ = ("pe", "addr", "nbytes", "ready", "events", "box", "__weakref__")

    def __init__(self, pe: str, addr: int, nbytes: int) -> None:
        self.pe = pe
        self.addr = addr
        self.nbytes = nbytes
        self.ready: Any = None  # producer's done event (None: ready / untracked)
        self.events: list[Any] = []  # every command touching it (free waits for them)
        self.box: list[int] = [addr]  # shared with the finalizer; -1 once freed


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


# tl operations one launch may run (each op makes a tl tensor); the bundled benches use
# under 10 000. Ends a kernel that loops forever on tl ops (docs/errors.md).
DEFAULT_MAX_OPS = 5_000_000


class KernelRunner:
    """Runs a kernel's grid programs as greenlets inside the simulator (pass 1)."""

    def __init__(self, sim: Any, kernel: Kernel, grid: tuple[int, ...], args: tuple,
                 meta: dict[str, Any], store: MemoryStore, pes: list[Any],
                 max_ops: int = 0) -> None:  # fmt: skip
        self.ops = 0  # tl operations so far, over all programs (tensor.Tensor counts them)
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
        self.alloc = {p.id: sim.pe_tcm(p).allocator for p in pes}
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
        CTX[0] = prog
        try:
            return prog.greenlet.switch(value)
        finally:
            CTX[0] = None

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
