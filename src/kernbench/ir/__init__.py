"""NPU IR: data model, verifier, ONNX import, QConfig, quantized math, reference
interpreter. See docs/ir.md."""

from __future__ import annotations

from kernbench.ir.model import IR_VERSION, Graph, LayerIR, QuantParams, TensorIR
from kernbench.ir.qconfig import QConfig, load_qconfig
from kernbench.ir.verify import validate_ir_file, verify

__all__ = [
    "IR_VERSION",
    "Graph",
    "LayerIR",
    "TensorIR",
    "QuantParams",
    "QConfig",
    "load_qconfig",
    "verify",
    "validate_ir_file",
    "import_onnx",
]


def import_onnx(path, qconfig=None, *, fuse=True):  # lazy: keeps onnx off the import path
    from kernbench.ir.onnx_import import import_onnx as _imp

    return _imp(path, qconfig, fuse=fuse)
