"""Pattern fusion: each module rewrites one pattern of primitive layers into an IR op.

`run_fusions` applies them in a fixed order; dead layers left behind are removed by
`finalize`."""

from __future__ import annotations

from kernbench.ir.model import Graph
from kernbench.ir.onnx_import.finalize import dead_code
from kernbench.ir.onnx_import.fuse.activation import fuse_activations
from kernbench.ir.onnx_import.fuse.attention import ungroup_kv
from kernbench.ir.onnx_import.fuse.attention_flow import fuse_attention
from kernbench.ir.onnx_import.fuse.gemm_bias import fuse_gemm_bias
from kernbench.ir.onnx_import.fuse.kv_update import fuse_kv_update
from kernbench.ir.onnx_import.fuse.layer_norm import fuse_layer_norm
from kernbench.ir.onnx_import.fuse.outer_product import fuse_outer_product
from kernbench.ir.onnx_import.fuse.qdq import fuse_qdq
from kernbench.ir.onnx_import.fuse.qkv_proj import fuse_qkv_proj
from kernbench.ir.onnx_import.fuse.rms_norm import fuse_rms_norm
from kernbench.ir.onnx_import.fuse.rope import fuse_rope

PASSES = [
    fuse_qdq,
    fuse_outer_product,
    fuse_gemm_bias,
    fuse_kv_update,
    fuse_layer_norm,
    fuse_rms_norm,
    fuse_activations,
    fuse_rope,
    fuse_attention,
    ungroup_kv,
    fuse_qkv_proj,
]


def run_fusions(g: Graph) -> None:

    for p in PASSES:
        p(g)
        dead_code(g)
