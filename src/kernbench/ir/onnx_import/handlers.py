"""The ONNX op handlers by op type: the table the importer dispatches on
(`lower.Lowering.lower_node`), and the op types it claims.

Each handler takes the import state (`lower.Lowering`) and one ONNX node and emits IR
layers; the table lives here, above the handler modules and `lower.py`, so that the
handlers import `Lowering` and `lower.py` imports no handler.
"""

from __future__ import annotations

from kernbench.ir.onnx_import import handlers_basic as hb
from kernbench.ir.onnx_import import handlers_te as ht
from kernbench.ir.onnx_import import windows
from kernbench.ir.onnx_import.lower import Handler
from kernbench.ir.onnx_import.lower_extra import EXTRA_HANDLERS
from kernbench.ir.ops import BY_ONNX

HANDLERS: dict[str, Handler] = {
    **{op: hb._elementwise for op in BY_ONNX},
    "Cast": hb._cast,
    "Identity": hb._identity,
    "Dropout": hb._dropout,
    "Constant": hb._constant,
    "MatMul": hb._matmul,
    "Gemm": hb._gemm,
    "ReduceMean": hb._reduce,
    "ReduceSum": hb._reduce,
    "ReduceMax": hb._reduce,
    "ReduceMin": hb._reduce,
    **{f"Reduce{k}": hb._reduce for k in ("Prod", "L1", "L2", "LogSum", "LogSumExp", "SumSquare")},
    "Softmax": hb._softmax,
    "LayerNormalization": hb._layernorm,
    "RMSNormalization": hb._rmsnorm,
    "Gelu": hb._gelu,
    "Gather": hb._gather,
    "GatherElements": hb._gather_elements,
    "GatherND": hb._gather_nd,
    "Reshape": hb._reshape_like,
    "Squeeze": hb._reshape_like,
    "Unsqueeze": hb._reshape_like,
    "Flatten": hb._reshape_like,
    "Transpose": hb._transpose,
    "Split": hb._split,
    "Slice": hb._slice,
    "Concat": hb._concat,
    "Expand": hb._expand,
    "Conv": ht._conv,
    "Attention": ht._attention,
    "QuantizeLinear": ht._quantize,
    "DequantizeLinear": ht._dequantize,
    "DynamicQuantizeLinear": ht._dyn_quant,
    "MatMulInteger": ht._matmul_integer,
    "QLinearMatMul": ht._qlinear_matmul,
    "QLinearConv": ht._qlinear_conv,
    "ConvInteger": ht._conv_integer,
    "MaxPool": windows.pool,
    "AveragePool": windows.pool,
    "GlobalAveragePool": windows.global_pool,
    "GlobalMaxPool": windows.global_pool,
    "CumSum": windows.cumsum,
    "Clip": windows.clip,
    **EXTRA_HANDLERS,
}

#: The ONNX op types the importer claims (docs/onnx-support.md covers each).
SUPPORTED_OPS = tuple(sorted(HANDLERS))
