"""Bundles (DESIGN.md §3): a compiled program folder, and running it with real data.

    bundle/
      cmdq.json      the program           memory.json   tensor → HBM address, dtype, shape
      weights.npz    constants to deploy   ir.json (+ ir_weights.npz)  the compiled IR
      model.onnx     the source model      topology.yaml the NPU it was compiled for
      ir_weights_model.json  the IR weights read from model.onnx (`ir.bundle_ir`)

`run_with_data` deploys weights and inputs into a MemoryStore (every replica), runs the
timing pass with the op logger on, runs the DataExecutor, and reads the graph outputs
(and, on request, every layer's outputs) back from HBM.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernbench.cmdq.hw import limits_for
from kernbench.cmdq.opcodes.base import Opcode, TcmDataEnv
from kernbench.cmdq.schema import CmdqProgram
from kernbench.cmdq.validate import check_program
from kernbench.common.pe_commands import PeCommand
from kernbench.common.tile_plan import StageType
from kernbench.compiler.hbm import PACKED_BYTES
from kernbench.errors import AddressError, InputError
from kernbench.host.simulate import CmdqRun, PhaseHook, no_phase, simulate_program
from kernbench.ir.bundle_ir import load_bundle_ir
from kernbench.ir.interpreter import Interpreter, prepare
from kernbench.ir.model import Graph, LayerIR, load_weights, save_weights
from kernbench.numerics import quant as qmath
from kernbench.numerics.compare import compare
from kernbench.numerics.dtypes import np_dtype
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLog, OpLogger, OpRecord
from kernbench.topology.model import Topology

#: run_with_data's `watch_ops(records, run, initial store)`: the data pass's `on_commit`
WatchOps = Callable[[list[OpRecord], CmdqRun, MemoryStore], Callable[[int, MemoryStore], None] | None]
OUTPUTS_JSON = "outputs.json"  # a saved run's graph outputs (save_run, host/replay.py)
SAVED_OUTPUTS = "outputs.npz"  # a saved run's output values, the replay's reference


@dataclass
class Bundle:
    path: Path
    memory: dict[str, Any]
    graph: Graph
    weights: dict[str, np.ndarray]

    @classmethod
    def load(cls, path: Path) -> Bundle:
        path = Path(path)
        for name in ("cmdq.json", "memory.json", "weights.npz", "ir.json"):
            if not (path / name).exists():
                raise InputError(f"not a bundle: {name} is missing", file=str(path))
        try:
            memory = json.loads((path / "memory.json").read_text(encoding="utf-8"))
            if not isinstance(memory, dict) or "tensors" not in memory or "views" not in memory:
                raise ValueError("expected 'tensors' and 'views'")
        except (OSError, ValueError) as e:
            raise InputError(f"unreadable: {e}", file=str(path / "memory.json")) from None
        graph = load_bundle_ir(path)
        return cls(path, memory, graph, load_weights(path / "weights.npz"))

    def check_fits(self, topology: Topology) -> None:
        """Every tensor of the memory map lies inside `topology`'s HBM."""
        for key, a in sorted(self.memory["tensors"].items()):
            runs = ([(addr, nb) for _, nb, addr in a["parts"]] if a.get("parts")
                    else [(addr, a["nbytes"]) for addr in a["replicas"] or [a["address"]]])
            for addr, nb in runs:
                if addr + nb > topology.hbm_bytes:
                    raise InputError(
                        f"tensor '{key}' at {addr:#x} (+{nb} B) is beyond the "
                        f"{topology.hbm_bytes:#x}-byte HBM of '{topology.name}': the bundle "
                        "was compiled for a larger NPU", file=str(self.path / "memory.json"))

    def view(self, tid: str) -> dict[str, Any]:
        v = self.memory["views"].get(tid)
        if v is None:
            raise InputError(f"tensor '{tid}' has no placement", file=str(self.path / "memory.json"))
        return v


@dataclass
class DataContext:
    """What attaching data descriptions needs: the IR (and the interpreter's quantization
    state, to describe whole-layer ops), the memory map. The descriptions themselves are
    plain data: the op log holds no IR object."""

    bundle: Bundle
    interp: Any = None
    layers: dict[str, LayerIR] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.interp = Interpreter(self.bundle.graph)
        self.layers = {n.id: n for n in self.bundle.graph.nodes}

    def attach(self, e: Opcode, cmd: PeCommand, pe_id: str, bank_bytes: int,
               pe_ids: tuple[str, ...] = ()) -> None:
        """Attach entry ``e``'s data description to its command (the opcode's ``data``)."""
        desc = e.data(_DataEnv(self, e, cmd, pe_id, bank_bytes, pe_ids))
        if desc is not None:
            cmd.params["data"] = desc

    def _attach_layer(self, e: Opcode, cmd: PeCommand) -> None:
        layer = self.layers.get(e.layer_id)
        if layer is None:
            raise InputError(f"entry {e.id}: layer '{e.layer_id}' is not in ir.json",
                             field="layer_id")
        data = self.layer_data(e.id, layer)
        if data is None:
            return
        compute = _compute_stages(cmd)
        compute[0]["data"] = data
        for _ in range(len(data["dst_addrs"]) - len(compute)):
            _timing_tile(cmd)

    def layer_data(self, entry_id: int, layer: LayerIR) -> dict[str, Any] | None:
        """The `layer` math record of an IR layer: its numerics kernel and plain params
        (the interpreter's own LayerCall), its constants as arrays, the HBM addresses,
        shapes, dtypes and scales of its inputs and of its placed outputs."""
        g = self.bundle.graph
        addrs, shapes, dtypes, scales, args, consts = [], [], [], [], [], []
        for tid in layer.inputs:
            if not tid:
                args.append(None)
            elif g.tensors[tid].const:
                args.append("const")
                consts.append(self.interp.const_value(tid))
            else:
                v = self.bundle.view(tid)
                if list(v["strides"]) != list(_contig(tuple(v["shape"]))):
                    raise InputError(f"entry {entry_id}: layer '{layer.id}' input '{tid}' is a "
                                     "strided view; a layer op reads contiguous tensors only")
                args.append("in")
                addrs.append(v["address"])
                shapes.append(v["shape"])
                dtypes.append(v["dtype"])
                scales.append(v.get("scale"))  # a cache stored at KV bits is read as real
        outs = [(j, tid) for j, tid in enumerate(layer.outputs)
                if tid and tid in self.bundle.memory["views"]]
        if not outs:
            return None
        views = [self.bundle.view(tid) for _, tid in outs]
        call = prepare(self.interp, layer)
        cast = [self.interp.out_dtype(tid) for _, tid in outs]
        return {
            "op_kind": "math", "op_name": "layer", "op": "layer", "space": "hbm",
            "input_addrs": addrs, "input_shapes": shapes, "input_dtypes": dtypes,
            "input_spaces": ["hbm"] * len(addrs), "input_scales": scales,
            "kernel": call.kernel, "params": call.params, "args": args, "consts": consts,
            "outputs": [j for j, _ in outs], "cast": [None if c is None else c.name for c in cast],
            "dst_addrs": [v["address"] for v in views], "shapes_out": [v["shape"] for v in views],
            "dtypes_out": [v["dtype"] for v in views],
        }


class _DataEnv(TcmDataEnv):
    """The ISA's TCM data environment plus the bundle's IR for whole-layer entries."""

    def __init__(self, ctx: DataContext, entry: Opcode, cmd: PeCommand, pe_id: str,
                 bank_bytes: int, pe_ids: tuple[str, ...] = ()) -> None:
        super().__init__(entry, pe_id, bank_bytes, pe_ids)
        self.ctx, self.cmd = ctx, cmd

    def ir_layer(self, entry: Opcode) -> None:
        self.ctx._attach_layer(entry, self.cmd)


def _compute_stages(cmd: PeCommand) -> list[dict[str, Any]]:
    return [params for tile in cmd.tile_stages for st, params in tile
            if st in (StageType.GEMM, StageType.MATH)]


def _timing_tile(cmd: PeCommand) -> None:
    """A zero-data MATH stage the data pass once needed per extra output; kept so that
    timing stays identical while the op record writes every output."""
    cmd.tile_stages.append([(StageType.MATH, {"op": "copy", "length": 1, "rows": 1})])
    if cmd.tile_staging_bytes:
        cmd.tile_staging_bytes.append(1)


def deploy(store: MemoryStore, bundle: Bundle, inputs: dict[str, np.ndarray]) -> None:
    """Host side: constants to every replica (or each part to its cube), then the graph
    inputs."""
    for key, a in bundle.memory["tensors"].items():
        if key not in bundle.weights:
            continue
        arr = bundle.weights[key]
        packed = a["dtype"] in PACKED_BYTES  # int4 pairs, block-float blocks: their bytes
        if a.get("parts"):  # placed once, cut over the cubes
            _write_parts(store, a, np.asarray(arr, np.uint8) if packed else
                         np.ascontiguousarray(arr).astype(np_dtype(a["dtype"])))
            continue
        for addr in a["replicas"] or [a["address"]]:
            if packed:
                store.write_bytes("hbm", addr, np.asarray(arr, np.uint8).view(np.uint8))
            else:
                store.write("hbm", addr, np.ascontiguousarray(arr).astype(np_dtype(a["dtype"])))
    for tid in bundle.graph.inputs:
        if tid not in inputs:
            raise InputError(f"missing input '{tid}'", field="--inputs")
        t = bundle.graph.tensors[tid]
        x = np.asarray(inputs[tid])
        if list(x.shape) != list(t.shape):
            raise InputError(f"input '{tid}' has shape {list(x.shape)}, expected {t.shape}",
                             field="--inputs")
        a = bundle.memory["tensors"][tid]
        data = np.ascontiguousarray(x.astype(np_dtype(a["dtype"])))
        if a.get("parts"):  # placed once, spread by rows over the cubes
            _write_parts(store, a, data)
            continue
        for addr in a["replicas"] or [a["address"]]:
            store.write("hbm", addr, data)


def _write_parts(store: MemoryStore, a: dict[str, Any], data: np.ndarray) -> None:
    """The bytes of `data` (stored dtype, contiguous), each part to its own address."""
    raw = data.reshape(-1).view(np.uint8)
    for off, nb, addr in a["parts"]:
        store.write_bytes("hbm", addr, raw[off:off + nb])


def read_tensor(store: MemoryStore, bundle: Bundle, tid: str) -> np.ndarray:
    """A tensor back from HBM through its placement (strided views included)."""
    return read_view(store, bundle.view(tid))


def read_view(store: MemoryStore, v: dict[str, Any]) -> np.ndarray:
    """The tensor of memory-map view `v` (address, shape, element strides, dtype, and a
    `scale` when stored quantized) back from HBM, as real values."""
    shape = tuple(v["shape"])
    strides = tuple(v["strides"])
    dt = np_dtype(v["dtype"])
    itemsize = np.dtype(dt).itemsize
    n = int(np.prod(shape)) if shape else 1
    if v.get("parts"):
        span = sum((d - 1) * s for d, s in zip(shape, strides, strict=True)) + 1 if shape else 1
        flat = _read_parts(store, v, span * itemsize).view(dt)
        out = np.lib.stride_tricks.as_strided(flat, shape, tuple(s * itemsize for s in strides))
        return _dequant(v, np.array(out))
    if not shape or strides == _contig(shape):
        return _dequant(v, store.read("hbm", v["address"], shape, v["dtype"]).copy())
    span = sum((d - 1) * s for d, s in zip(shape, strides, strict=True)) + 1
    flat = store.read("hbm", v["address"], (span,), v["dtype"])
    out = np.lib.stride_tricks.as_strided(flat, shape, tuple(s * itemsize for s in strides))
    assert out.size == n
    return _dequant(v, np.array(out))


def _read_parts(store: MemoryStore, v: dict[str, Any], nbytes: int) -> np.ndarray:
    """`nbytes` logical bytes from a view's address of a storage spread over the cubes:
    each [first, end) logical byte range of a part is read at its physical address."""
    lo = v["address"]
    out = np.zeros(nbytes, np.uint8)
    for p_lo, p_hi, phys in v["parts"]:
        a, b = max(lo, p_lo), min(lo + nbytes, p_hi)
        if a < b:
            out[a - lo:b - lo] = store.read("hbm", phys + a - p_lo, (b - a,), "uint8")
    return out


def _dequant(view: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """A tensor the compiler stores quantized (a KV cache) is read back as real values."""
    if "scale" not in view:
        return x
    return qmath.dequantize(x, np.float32(view["scale"]), 0)


def _contig(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def run_with_data(bundle: Bundle, program: CmdqProgram, topology: Topology,
                  inputs: dict[str, np.ndarray],
                  *, trace: bool = True, keep_layers: bool = False,
                  save_oplog: Path | None = None, phase: PhaseHook | None = None,
                  watch_ops: WatchOps | None = None) -> tuple[Any, dict, MemoryStore]:
    """Timing pass with op log, then the data pass. Returns (run, outputs, final store).
    With `save_oplog`, the op log, the initial memory and the outputs' placements are
    written there first, and the output values after the data pass (host/replay.py replays
    them and compares). `phase(name, total, poll)`: a context manager around each pass
    (progress display). `watch_ops(records, run, init)`, when given, returns the data
    pass's `on_commit(idx, store)` hook (op boundaries)."""
    check_program(program, limits_for(topology), str(bundle.path / "cmdq.json"))
    bundle.check_fits(topology)
    store = MemoryStore.for_topology(topology)
    tcm = topology.config.cube.pe_template.pe_tcm
    zeros = np.zeros((tcm.capacity_kib - tcm.reserved_kib) * 1024, np.uint8)
    for pe in topology.pes:  # TCM is cleared at reset: a stale read is wrong data, not a crash
        store.write_bytes(f"tcm:{pe.id}", 0, zeros)
    deploy(store, bundle, inputs)
    init = store.snapshot()
    log = OpLogger()
    ctx = DataContext(bundle)
    run = simulate_program(program, topology, file=str(bundle.path / "cmdq.json"),
                           op_logger=log, trace=trace, data=ctx, phase=phase)
    if save_oplog is not None:
        save_run(Path(save_oplog), log.log(), init, bundle)
    hook = watch_ops(log.records, run, init) if watch_ops is not None else None
    ex = DataExecutor(log, init, on_commit=hook)
    with (phase or no_phase)("data pass", len(log), lambda: ex.executed):
        try:
            final = ex.run()
        except AddressError as e:
            idx = getattr(e, "op_index", None)
            if idx is None:
                raise
            # the program reads memory no tensor occupies (a tampered address that is in
            # bounds): bad input, named by its entry, not an internal error
            raise InputError(f"{entry_of(run, log.records[idx])}: {e}",
                             file=str(bundle.path / "cmdq.json")) from None
    outs = {}
    for tid in bundle.graph.outputs:  # in the graph's own dtypes (fp16 storage widened)
        x = read_tensor(final, bundle, tid)
        want = np_dtype(bundle.graph.tensors[tid].dtype)
        outs[tid] = x.astype(want) if x.dtype != want else x
    if save_oplog is not None:  # the values replay checks itself against
        save_weights(outs, Path(save_oplog) / SAVED_OUTPUTS)
    return run, outs, final


def entry_of(run: CmdqRun, rec: OpRecord) -> str:
    """'entry N (OPCODE, layer 'L')': the CMDQ entry of timing run `run` whose command ran
    op record `rec` (on the record's PE, over the record's start time)."""
    topo = run.sim.topology
    for src, e in zip(run.program.cmdq, run.entries, strict=True):
        cmd = e.command
        start = cmd.start_ns if cmd is not None and cmd.start_ns is not None else e.start_ns
        if e.kind != "command" or start is None or e.end_ns is None:
            continue
        pe = topo.pe(e.pe).id
        if rec.component_id.startswith(pe + ".") and start <= rec.t_start <= e.end_ns:
            return f"entry {e.id} ({src.opcode}, layer '{src.layer_id}')"
    return f"op {rec.op_kind}/{rec.op_name} on {rec.component_id} at {rec.t_start:g} ns"


def save_run(path: Path, log: OpLog, init: MemoryStore, bundle: Bundle) -> None:
    """Write op log `log`, the initial memory `init` and `bundle`'s graph outputs
    (placement and dtype) to folder `path`: what host/replay.py needs."""
    path.mkdir(parents=True, exist_ok=True)
    log.save(path)
    init.save(path)
    outs = {tid: {"view": bundle.view(tid), "dtype": bundle.graph.tensors[tid].dtype}
            for tid in bundle.graph.outputs}
    (path / OUTPUTS_JSON).write_text(json.dumps(outs, indent=1, sort_keys=True) + "\n",
                                     encoding="utf-8")


def layer_divergence(bundle: Bundle, store: MemoryStore, ref_values: dict[str, np.ndarray],
                     ) -> list[dict[str, Any]]:
    """Compare every layer's stored outputs with the reference, in topological order."""
    rows = []
    views = bundle.memory["views"]
    for n in bundle.graph.nodes:
        for tid in n.outputs:
            if not tid or tid not in views or tid not in ref_values:
                continue
            try:
                got = read_tensor(store, bundle, tid)
            except Exception as e:  # never written: the layer did not produce it
                rows.append({"layer": n.id, "op_type": n.op_type, "tensor": tid, "ok": False,
                             "max_abs_err": float("inf"), "cosine": 0.0, "error": str(e)})
                continue
            ref = np.asarray(ref_values[tid])
            c = compare(got.astype(ref.dtype) if got.dtype != ref.dtype else got, ref)
            rows.append({"layer": n.id, "op_type": n.op_type, "tensor": tid,
                         "ok": bool(c["allclose"]), "max_abs_err": float(c["max_abs_err"]),
                         "cosine": float(c["cosine"])})
    return rows
