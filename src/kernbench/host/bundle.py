"""Bundles (DESIGN.md §3): a compiled program folder, and running it with real data.

    bundle/
      cmdq.json      the program           memory.json   tensor → HBM address, dtype, shape
      weights.npz    constants to deploy   ir.json (+ ir_weights.npz)  the compiled IR
      model.onnx     the source model      topology.yaml the NPU it was compiled for

`run_with_data` deploys weights and inputs into a MemoryStore (every replica), runs the
timing pass with the op logger on, runs the DataExecutor, and reads the graph outputs
(and, on request, every layer's outputs) back from HBM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernbench.cmdq import data as cdata
from kernbench.cmdq.schema import DmaTile, LayerOp, TeGemmTile, VeTile
from kernbench.common.tile_plan import StageType
from kernbench.errors import InputError


@dataclass
class Bundle:
    path: Path
    memory: dict[str, Any]
    graph: Any
    weights: dict[str, np.ndarray]

    @classmethod
    def load(cls, path: Path) -> Bundle:
        import json

        from kernbench.ir.model import Graph, load_weights

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
        graph = Graph.load(path / "ir.json", path / "ir_weights.npz")
        return cls(path, memory, graph, load_weights(path / "weights.npz"))

    def check_fits(self, topology: Any) -> None:
        """Every tensor of the memory map lies inside `topology`'s HBM."""
        for key, a in sorted(self.memory["tensors"].items()):
            for addr in a["replicas"] or [a["address"]]:
                if addr + a["nbytes"] > topology.hbm_bytes:
                    raise InputError(
                        f"tensor '{key}' at {addr:#x} (+{a['nbytes']} B) is beyond the "
                        f"{topology.hbm_bytes:#x}-byte HBM of '{topology.name}': the bundle "
                        "was compiled for a larger NPU", file=str(self.path / "memory.json"))

    def view(self, tid: str) -> dict[str, Any]:
        v = self.memory["views"].get(tid)
        if v is None:
            raise InputError(f"tensor '{tid}' has no placement", file=str(self.path / "memory.json"))
        return v


@dataclass
class DataContext:
    """What attaching data descriptions needs: the IR, its interpreter, the memory map."""

    bundle: Bundle
    interp: Any = None
    layers: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from kernbench.ir.interpreter import Interpreter

        self.interp = Interpreter(self.bundle.graph)
        self.layers = {n.id: n for n in self.bundle.graph.nodes}

    def attach(self, e: Any, cmd: Any, pe_id: str, bank_bytes: int) -> None:
        space = f"tcm:{pe_id}"

        def addr(role: str) -> int:
            return getattr(e, f"{role}_bank") * bank_bytes + getattr(e, f"{role}_offset")

        if isinstance(e, DmaTile):
            cmd.params["data"] = cdata.dma_data(e, space, addr("spm"))
        elif isinstance(e, TeGemmTile):
            cmd.params["data"] = cdata.gemm_data(e, space, addr)
        elif isinstance(e, VeTile):
            cmd.params["data"] = cdata.ve_data(e, space, addr)
        elif isinstance(e, LayerOp):
            self._attach_layer(e, cmd)

    def _attach_layer(self, e: Any, cmd: Any) -> None:
        layer = self.layers.get(e.layer_id)
        if layer is None:
            raise InputError(f"entry {e.id}: layer '{e.layer_id}' is not in ir.json",
                             field="layer_id")
        g = self.bundle.graph
        addrs, shapes, dtypes, consts, scales = [], [], [], {}, []
        for i, tid in enumerate(layer.inputs):
            if not tid:
                continue
            if g.tensors[tid].const:
                consts[i] = tid
                continue
            v = self.bundle.view(tid)
            if list(v["strides"]) != list(_contig(tuple(v["shape"]))):
                raise InputError(f"entry {e.id}: layer '{layer.id}' input '{tid}' is a strided "
                                 "view; a layer op reads contiguous tensors only")
            addrs.append(v["address"])
            shapes.append(v["shape"])
            dtypes.append(v["dtype"])
            scales.append(v.get("scale"))  # a cache stored at KV bits is read as real values
        compute = [s for s in _compute_stages(cmd)]
        for j, tid in enumerate(layer.outputs):
            if not tid or tid not in self.bundle.memory["views"]:
                continue
            v = self.bundle.view(tid)
            stage = compute[min(j, len(compute) - 1)]
            if "data" in stage:  # more outputs than tiles: add a zero-cost extra tile
                stage = _extra_tile(cmd)
            stage["data"] = {
                "op_kind": "math", "op_name": "ir_layer", "op": "ir_layer", "space": "hbm",
                "input_addrs": list(addrs), "input_shapes": list(shapes),
                "input_dtypes": list(dtypes), "input_spaces": ["hbm"] * len(addrs),
                "dst_addr": v["address"], "shape_out": v["shape"], "dtype": v["dtype"],
                "input_scales": list(scales), "ctx": (self.interp, layer, j, consts),
            }


def _compute_stages(cmd: Any) -> list[dict[str, Any]]:
    return [params for tile in cmd.tile_stages for st, params in tile
            if st in (StageType.GEMM, StageType.MATH)]


def _extra_tile(cmd: Any) -> dict[str, Any]:
    params = {"op": "copy", "length": 1, "rows": 1}
    cmd.tile_stages.append([(StageType.MATH, params)])
    if cmd.tile_staging_bytes:
        cmd.tile_staging_bytes.append(1)
    return params


def np_dtype(dt: str) -> Any:
    """numpy dtype of an IR / memory-map dtype string."""
    from kernbench.ir.onnx_import.lower import np_dtype as ir_np_dtype

    return ir_np_dtype(dt)


def deploy(store: Any, bundle: Bundle, inputs: dict[str, np.ndarray]) -> None:
    """Host side: constants to every replica, then the graph inputs."""
    for key, a in bundle.memory["tensors"].items():
        if key not in bundle.weights:
            continue
        arr = bundle.weights[key]
        for addr in a["replicas"] or [a["address"]]:
            if a["dtype"] == "int4":
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
        for addr in a["replicas"] or [a["address"]]:
            store.write("hbm", addr, np.ascontiguousarray(x.astype(np_dtype(a["dtype"]))))


def read_tensor(store: Any, bundle: Bundle, tid: str) -> np.ndarray:
    """A tensor back from HBM through its placement (strided views included)."""
    v = bundle.view(tid)
    shape = tuple(v["shape"])
    strides = tuple(v["strides"])
    dt = np_dtype(v["dtype"])
    itemsize = np.dtype(dt).itemsize
    n = int(np.prod(shape)) if shape else 1
    if not shape or strides == _contig(shape):
        return _dequant(v, store.read("hbm", v["address"], shape, v["dtype"]).copy())
    span = sum((d - 1) * s for d, s in zip(shape, strides, strict=True)) + 1
    flat = store.read("hbm", v["address"], (span,), v["dtype"])
    out = np.lib.stride_tricks.as_strided(flat, shape, tuple(s * itemsize for s in strides))
    assert out.size == n
    return _dequant(v, np.array(out))


def _dequant(view: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """A tensor the compiler stores quantized (a KV cache) is read back as real values."""
    if "scale" not in view:
        return x
    from kernbench.numerics import quant as qmath

    return qmath.dequantize(x, np.float32(view["scale"]), 0)


def _contig(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def run_with_data(bundle: Bundle, program: Any, topology: Any, inputs: dict[str, np.ndarray],
                  *, trace: bool = True, keep_layers: bool = False,
                  phase: Any = None) -> tuple[Any, dict, Any]:
    """Timing pass with op log, then the data pass. Returns (run, outputs, final store).
    `phase(name, total, poll)`: a context manager around each pass (progress display)."""
    from kernbench.cmdq.hw import limits_for
    from kernbench.cmdq.validate import check_program
    from kernbench.host.simulate import no_phase, simulate_program
    from kernbench.sim_engine.executor import DataExecutor
    from kernbench.sim_engine.memory_store import MemoryStore
    from kernbench.sim_engine.op_log import OpLogger

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
    ex = DataExecutor(log, init)
    with (phase or no_phase)("data pass", len(log), lambda: ex.executed):
        final = ex.run()
    outs = {}
    for tid in bundle.graph.outputs:  # in the graph's own dtypes (fp16 storage widened)
        x = read_tensor(final, bundle, tid)
        want = np_dtype(bundle.graph.tensors[tid].dtype)
        outs[tid] = x.astype(want) if x.dtype != want else x
    return run, outs, final


def layer_divergence(bundle: Bundle, store: Any, ref_values: dict[str, np.ndarray],
                     ) -> list[dict[str, Any]]:
    """Compare every layer's stored outputs with the reference, in topological order."""
    from kernbench.numerics.compare import compare

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
