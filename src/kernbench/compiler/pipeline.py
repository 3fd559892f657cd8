"""The compiler: the pass pipeline, bundle writing, and model loading.

    state, pm = compile_graph(graph, topology)      # runs PASSES under a PassManager
    write_bundle(state, out_dir, source_model=path) # cmdq.json, memory.json, weights.npz, ...

`pm.timings` holds the seconds each pass took (`kernbench compile --time-passes`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from kernbench.compiler.emit import Emit
from kernbench.compiler.layout import FoldTransposes
from kernbench.compiler.lower.plan_pass import Plan
from kernbench.compiler.lower.tile_pass import Tile
from kernbench.compiler.manager import PassManager
from kernbench.compiler.memory_plan import PlanMemory
from kernbench.compiler.order import Place
from kernbench.compiler.quantize import QuantizeActivations
from kernbench.compiler.roofline import layer_bounds
from kernbench.compiler.schedule import Schedule
from kernbench.compiler.simplify import DropNoOpReshapes
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.compiler.tcm_alloc import AllocateTcm
from kernbench.errors import InputError
from kernbench.ir import import_onnx
from kernbench.ir.bundle_ir import save_bundle_ir
from kernbench.ir.model import Graph, is_shape_only, save_weights
from kernbench.ir.onnx_import.initializers import Source, file_key, initializer_of
from kernbench.ir.onnx_import.loader import copy_with_external_data
from kernbench.ir.qconfig import apply_qconfig, load_qconfig
from kernbench.ir.verify import verify
from kernbench.numerics.quant import shared_weights
from kernbench.report.stats import write_json
from kernbench.topology.model import Topology

PASSES = (DropNoOpReshapes(), QuantizeActivations(), FoldTransposes(), PlanMemory(), Plan(),
          Tile(),
          Place(), AllocateTcm(),
          Schedule(), Emit())
PASS_NAMES = tuple(p.name for p in PASSES)


def compile_graph(graph: Graph, topology: Topology, options: CompileOptions | None = None, *,
                  dump_after: tuple[str, ...] = (), dump_dir: Path | None = None,
                  progress: Callable[[str], None] | None = None,
                  ) -> tuple[CompileState, PassManager]:
    """Run PASSES on `graph` for `topology`; a layer the compiler cannot handle is an
    InputError naming it."""
    state = CompileState(graph, topology, options or CompileOptions())
    pm = PassManager(PASSES, dump_after=tuple(dump_after), dump_dir=dump_dir,
                     progress=progress)
    try:
        with shared_weights():  # the calibration run and the lowering quantize them once
            state = pm.run(state)
    except ValueError as e:
        raise InputError(f"cannot compile: {e}") from None
    return state, pm


def load_model(path: Path, qconfig: Path | None = None) -> tuple[Graph, Path | None]:
    """An ONNX model or an ir.json (with weights.npz beside it, verified) → IR graph."""
    path = Path(path)
    if path.is_dir():
        path = path / "ir.json"
    if path.suffix == ".json":
        g = verify(Graph.load(path), file=str(path))  # a bad node names the file
        if qconfig is not None:
            apply_qconfig(g, load_qconfig(qconfig))
        src = path.parent / "model.onnx"
        return g, (src if src.exists() else None)
    return import_onnx(path, load_qconfig(qconfig) if qconfig else None), path


def write_bundle(state: CompileState, out: Path, source_model: Path | None = None, *,
                 cmdq: bool = True, entries: int | None = None,
                 weights: bool = True) -> list[Path]:
    """Write the bundle folder atomically (a temp folder renamed into place). `cmdq` False
    leaves cmdq.json out (a run that simulates the program from memory and keeps no
    bundle: a real-size program's file is hundreds of MB); `entries` then counts the
    program's entries when the state holds none (a streamed compile, `compiler.stream`).
    `weights` False leaves out what only the data pass and the verification read
    (weights.npz, ir_weights.npz and its listing, the model copy; ir.json stays): a
    timing-only run's bundle that nobody keeps, whose weights are as large as the model."""
    if state.memory is None or (state.cmdq is None and (cmdq or entries is None)):
        raise RuntimeError("write_bundle: the state has not been through every pass")
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    if cmdq and state.cmdq is not None:
        write_json(state.cmdq.to_json(), tmp / "cmdq.json")
    write_json(state.memory.to_json(), tmp / "memory.json")
    if weights:
        _write_weights(state, tmp, source_model)
    else:
        (tmp / "ir.json").write_text(state.graph.to_json())  # as Graph.save writes it
    (tmp / "topology.yaml").write_text(
        yaml.safe_dump(state.topology.config.model_dump(mode="json"), sort_keys=True),
        encoding="utf-8")
    info: dict = {"passes": list(PASS_NAMES), "notes": state.notes,
                  "entries": len(state.cmdq.entries) if state.cmdq is not None else entries}
    if state.pe_choice is not None:
        info["pe_choice"] = state.pe_choice.to_json()
    write_json(info, tmp / "compile.json")
    write_json(layer_bounds(state), tmp / "roofline.json")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return sorted(out.iterdir())


def _write_weights(state: CompileState, tmp: Path, source_model: Path | None) -> None:
    """The bundle's weights.npz, ir.json with ir_weights.npz, and the model copy. An IR
    weight that is an initializer of the copied model, unchanged (`initializers`), is not
    written again: `ir.bundle_ir` lists it and reads it back from the copy."""
    arrays = {}
    shape_only = is_shape_only(state.graph)  # no weight values: weights.npz stays empty
    for key, a in sorted(state.memory.allocations.items()):
        if a.data is not None and not shape_only:
            arrays[key] = np.ascontiguousarray(a.data)
    save_weights(arrays, tmp / "weights.npz")
    graph = state.graph
    in_model: dict[str, Source] = {}
    if source_model is not None and Path(source_model).suffix == ".onnx":
        key = file_key(source_model)
        for tid, a in sorted(graph.weights.items()):
            if (src := initializer_of(a, key)) is not None:
                in_model[tid] = src
        copy_with_external_data(source_model, tmp / "model.onnx")  # + its external data
        if in_model and file_key(source_model) != key:  # rewritten while copied
            in_model = {}
    save_bundle_ir(graph, tmp, in_model)


__all__ = ["PASSES", "PASS_NAMES", "compile_graph", "load_model", "write_bundle"]
