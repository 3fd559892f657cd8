"""ONNX -> NPU IR importer: load (safety, checker, shape inference) -> lower (primitive
layers) -> fuse (one pattern per module in `fuse/`) -> finalize (ids, links, roles,
layouts) -> QConfig annotations."""

from __future__ import annotations

from pathlib import Path

import onnx

from kernbench.ir.model import Graph
from kernbench.ir.onnx_import.finalize import finalize
from kernbench.ir.onnx_import.fuse import run_fusions
from kernbench.ir.onnx_import.handlers import HANDLERS, SUPPORTED_OPS
from kernbench.ir.onnx_import.initializers import remember
from kernbench.ir.onnx_import.loader import load_model_keyed, prepare_model
from kernbench.ir.onnx_import.lower import Lowering
from kernbench.ir.qconfig import QConfig, apply_qconfig
from kernbench.ir.verify import verify

__all__ = ["import_onnx", "import_model_proto", "SUPPORTED_OPS"]


def import_onnx(path: str | Path, qconfig: QConfig | None = None, *, fuse: bool = True) -> Graph:
    """Import the ONNX file at `path` into a verified IR Graph. The initializer arrays it
    reads are remembered with the file's key (`initializers`)."""
    model, key, arrays = load_model_keyed(path)
    return _import(model, qconfig, fuse=fuse, file=str(path), name=Path(path).stem, key=key,
                   arrays=arrays)


def import_model_proto(model: onnx.ModelProto, qconfig: QConfig | None = None, *,
                       fuse: bool = True) -> Graph:  # fmt: skip
    """Import an in-memory ModelProto of any opset from 7 on (the onnx Backend uses it)."""
    model = prepare_model(model)
    return _import(model, qconfig, fuse=fuse, file=None, name=model.graph.name or "model")


def _import(model: onnx.ModelProto, qconfig: QConfig | None, *, fuse: bool,
            file: str | None, name: str, key: tuple | None = None,
            arrays: dict | None = None) -> Graph:  # fmt: skip

    lw = Lowering(model, HANDLERS, file=file, arrays=arrays)
    if key is not None:
        for init in model.graph.initializer:
            a = lw.consts.get(init.name)
            if a is not None:
                remember(a, key, init.name)
    g = lw.run()
    g.metadata["model_name"] = name
    if fuse:
        run_fusions(g)
    finalize(g)
    prequant = any(t.quant is not None for t in g.tensors.values()) or any(
        n.op_type in ("QUANTIZE", "DEQUANTIZE", "QDQ", "DYNAMIC_QUANTIZE", "MATMUL_INTEGER",
                      "QLINEAR_MATMUL", "QLINEAR_CONV", "CONV_INTEGER") for n in g.nodes  # fmt: skip
    )
    g.metadata["prequantized"] = prequant
    apply_qconfig(g, qconfig, imported_default_float=prequant)
    verify(g, file=file)
    return g
