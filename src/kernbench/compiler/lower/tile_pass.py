"""The tiling pass: every IR layer becomes tile operations on PEs (the TileGraph), reading
the decisions of the lowering plan (`plan_pass`).

Split by job (data semantics per tile: docs/compiler.md):
- `context`: the shared builder (TCM buffers, tile ops, DMAs, constants, phases);
- `placement`: which PE a tile runs on, where the data it reads lives, which layers are
  views;
- `gemm_layer`: GEMM / QKV_PROJ (activation prepared once, then the `gemm` tiles:
  array-aligned output tiles, K loops, epilogue);
- `rowwise`: LAYER_NORM, RMS_NORM, SOFTMAX, GELU, SILU, ADD, MUL in row blocks;
- `attention`: integer ATTENTION per (batch, KV group) and query block;
- `attention_float`: fp32 ATTENTION the same way (and the ATTENTION dispatch);
- `bmm`: MATMUL of two activations as batched GEMM tiles (int8 or fp32);
- `attention_kv`: the KV-block loop of an attention blocked along the KV sequence;
- `attention_parts`: an attention split along the keys over PEs, combined (decode);
- `conv`: CONV as TE_CONV_TILE implicit GEMMs (dense, grouped) or VE_DWCONV_TILE
  (depthwise), with the ReLU / Clip epilogue the plan names (`clamp`, `conv_plan`);
  `conv_tiles`, `window`: what they share, their geometry;
- `pool`: POOL as VE_POOL_TILE blocks, REDUCE over trailing axes as VE_REDUCE_TILE;
- `elementwise`: ReLU / Clip as VE_CLIP_TILE blocks (none when a conv computes it),
  other ELEMENTWISE kinds, and ADD / MUL with broadcasting or integer
  data, as VE_ELEMENTWISE_TILE blocks; CUMSUM as VE_CUMSUM_TILE row blocks;
- `gather`: EMBEDDING and data-index gathers as DMA_GATHER_TILE row lookups, GATHER /
  GATHER_ND / GATHER_ELEMENTS with constant indices as DMAs (layout moves);
- `kv_update`: KV cache rows copied (and quantized) into the present cache;
- `rope`: ROPE as VE_ROPE_TILE row blocks (cos / sin half rows loaded per tile);
- `copy`: TRANSPOSE / SLICE / SPLIT / CONCAT as strided DMA copies (VE_TRANSPOSE_TILE
  when the innermost axis moves);
- `qdq`: per-tensor fake quantization (QDQ) in row blocks;
- `dynq`: DYNAMIC_QUANTIZE (run-time min / max, then quantize) and MATMUL_INTEGER → Cast
  → Mul as an integer GEMM with a run-time zero-point term and scale;
- `qlinear`, `qlinear_conv`: QOperator QLINEAR_MATMUL / QLINEAR_CONV as GEMM / conv tiles
  with the zero points in the TE's int32 bias and a requantize epilogue;
  `qlinear_bmm`: QLINEAR_MATMUL of two activations on zero-point-centered fp16 blocks;
- `quant_rows`: per-tensor QUANTIZE / DEQUANTIZE of activations in row blocks;
- `layer_op`: the fallback, a whole layer on one PE (VE_LAYER_OP / TE_LAYER_OP).
A lowering returns False when it cannot tile a layer; the layer then runs as a layer op,
as the lowering plan's `whole` says (`whole_plan` asks the same functions the lowerings
refuse with; the plan pass pinned the spread storage such a layer touches).
Views, folded transposes, DEQUANTIZEs the GEMM reads through and QDQs whose integer GEMMs
quantize their input themselves take no operation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from kernbench.compiler.layout import COPY_OPS
from kernbench.compiler.lower.attention_float import lower_any_attention
from kernbench.compiler.lower.bmm import lower_bmm
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.conv import lower_conv
from kernbench.compiler.lower.copy import lower_copy
from kernbench.compiler.lower.dynq import lower_dynamic_quantize, lower_matmul_integer
from kernbench.compiler.lower.elementwise import lower_clamp, lower_cumsum, lower_elementwise
from kernbench.compiler.lower.fuse_vector import fuse_chains
from kernbench.compiler.lower.gather import lower_gather
from kernbench.compiler.lower.gemm_layer import lower_gemm, lower_qkv_proj
from kernbench.compiler.lower.kv_update import lower_kv_update
from kernbench.compiler.lower.layer_op import lower_layer_op
from kernbench.compiler.lower.lone_plan import takes_no_op
from kernbench.compiler.lower.pool import lower_pool, lower_reduce
from kernbench.compiler.lower.qdq import lower_qdq
from kernbench.compiler.lower.qlinear_bmm import lower_any_qlinear_matmul
from kernbench.compiler.lower.qlinear_conv import lower_qlinear_conv
from kernbench.compiler.lower.quant_rows import lower_quant_rows
from kernbench.compiler.lower.rope import lower_rope
from kernbench.compiler.lower.row_spec import ROW_OPS
from kernbench.compiler.lower.rowwise import lower_row_op
from kernbench.compiler.region import Region, StorageUse
from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import TileGraph, TileOp
from kernbench.ir.model import LayerIR


def _row_or_elementwise(lw: Lowering, n: LayerIR) -> bool:
    """ADD / MUL: row-wise tiles, else broadcasting element-wise tiles."""
    return lower_row_op(lw, n) or lower_elementwise(lw, n)


#: op type → its tiled lowering (returns False when the layer must run whole)
LOWERINGS: dict[str, Callable[[Lowering, LayerIR], bool]] = {
    "GEMM": lower_gemm, "QKV_PROJ": lower_qkv_proj, "ATTENTION": lower_any_attention,
    "KV_UPDATE": lower_kv_update, "QDQ": lower_qdq, **{op: lower_row_op for op in ROW_OPS},
    "MATMUL": lower_bmm, "DYNAMIC_QUANTIZE": lower_dynamic_quantize,
    "MATMUL_INTEGER": lower_matmul_integer,
    "CONV": lower_conv, "POOL": lower_pool, "REDUCE": lower_reduce,
    "ELEMENTWISE": lambda lw, n: lower_clamp(lw, n) or lower_elementwise(lw, n),
    "ADD": _row_or_elementwise, "MUL": _row_or_elementwise, "CUMSUM": lower_cumsum,
    "EXPAND": lower_elementwise,
    **{op: lower_gather for op in ("EMBEDDING", "GATHER", "GATHER_ND", "GATHER_ELEMENTS")},
    "ROPE": lower_rope, **{op: lower_copy for op in COPY_OPS},
    "QLINEAR_MATMUL": lower_any_qlinear_matmul, "QLINEAR_CONV": lower_qlinear_conv,
    "QUANTIZE": lower_quant_rows, "DEQUANTIZE": lower_quant_rows,
}


def lower_graph(state: CompileState) -> TileGraph:
    """The TileGraph of `state.graph` (needs the memory plan, the layout decisions and the
    lowering plan, whose pins leave no spread storage to a layer run whole)."""
    lw = start_lowering(state)
    for n in lw.g.nodes:
        lower_node(lw, n)
    return lw.tg


def start_lowering(state: CompileState) -> Lowering:
    """A Lowering of `state`'s graph, ready for `lower_node` on each node in order."""
    return Lowering(state)


def lower_node(lw: Lowering, n: LayerIR) -> None:
    """Append the tile ops of IR node `n` (the next one in graph order) to `lw.tg`."""
    lw.phase()
    lw.tg.node_streams.append(lw.stream)
    lw.pes.start_layer()
    if takes_no_op(lw, n):
        return  # a view, or a layer other tiles compute (a fused consumer: its GEMM's epilogue)
    lowering = LOWERINGS.get(n.op_type)
    first = len(lw.tg.ops)
    start = lw.start_layer(n.id)
    if lowering is None or not lowering(lw, n):
        planned = lw.lowering_plan
        if n.id in planned.epilogue or n.id in planned.clamps \
                or any(t in planned.kv_stores or t in planned.kv_rows for t in n.outputs):
            raise RuntimeError(f"{n.id}: the lowering plan gives its epilogue more to do "
                               "(a fused consumer or clamp, an int8 copy, KV rows), yet the "
                               "layer was not tiled")
        lower_layer_op(lw, n)
    lw.tg.drawn[n.id] = lw.pes.position - start
    fuse_chains(lw.tg, first)


def lower_alone(lw: Lowering, n: LayerIR) -> list[TileOp]:
    """The ops of node `n` (the next one in graph order), taken out of the lowering's
    TileGraph, which then holds none (a streamed compile keeps no program)."""
    lower_node(lw, n)
    ops = lw.tg.ops
    lw.tg.ops = []
    lw.tg.bufs = []
    return ops


@dataclass(frozen=True)
class Tile:
    """Lower every layer to tile ops (state.tiles); places constants (state.memory)."""

    name: str = "tiling"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ("tiles", "memory")

    def apply(self, state: CompileState) -> CompileState:
        state.tiles = lower_graph(state)
        return state

    def on_regions(self, state: CompileState, use: StorageUse) -> TileRegions:
        """Region by region, on the memory plan as it stands: a streamed compile surveys
        the lowering first (constants), so this pass places nothing new."""
        return TileRegions(start_lowering(state))


@dataclass
class TileRegions:
    """The tiling pass region by region: the tile ops of the region's nodes, which the
    lowering then forgets."""

    lowering: Lowering

    def feed(self, region: Region) -> None:
        for n in region.nodes:
            region.ops += lower_alone(self.lowering, n)

    def end(self, region: Region) -> None:
        pass


__all__ = ["LOWERINGS", "Lowering", "Tile", "TileRegions", "lower_alone", "lower_graph",
           "lower_node", "start_lowering"]
