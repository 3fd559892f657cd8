"""Layout pass: head transposes around attention become strided views.

`layout` folds data-moving transposes that only reorder (B, S, H, D) ↔ (B, H, S, D)
around tiled ATTENTION / KV_UPDATE, in front of a tiled ROPE, and in front of the tiled
copies (SPLIT / SLICE / CONCAT / TRANSPOSE, lower/copy.py): those tiles read and write the
heads with 2-D DMAs instead of a separate copy layer. It records its decision per
transpose node in `CompileState.folded` ("read": consumers read the source with permuted strides; "write":
the attention writes straight into the transpose's output) and leaves the IR unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernbench.compiler.hbm import ITEMSIZE
from kernbench.compiler.rope_tables import halves_equal
from kernbench.compiler.state import CompileState, FoldKind
from kernbench.ir.model import Graph, LayerIR
from kernbench.ir.ops import node_attrs
from kernbench.numerics.dtypes import bits as dtype_bits

#: op types lower/copy.py tiles as strided DMA copies
COPY_OPS = ("TRANSPOSE", "SLICE", "SPLIT", "CONCAT")
#: dtypes a DMA moves (CMDQ qbits), as lower/context.QBITS_OF
DMA_DTYPES = ("fp32", "fp16", "bf16", "int8", "uint8", "int32", "bool", "int16")

#: 16-bit float types the integer attention tiles read (widened to fp32 by the tiles)
HALF_FLOATS = ("fp16", "bf16")


def is_head_swap(n: LayerIR) -> bool:
    """A TRANSPOSE with perm (0, 2, 1, 3): (B, S, H, D) ↔ (B, H, S, D)."""
    return n.op_type == "TRANSPOSE" and list(node_attrs(n).perm) == [0, 2, 1, 3]


def float_formats(n: LayerIR) -> tuple[str | None, str | None] | None:
    """(Q format, K / V format) of a float attention: fp16 / bf16, or None for fp32, as
    `numerics.attention` rounds them (an integer activation width with a float KV leaves
    Q in fp32); None when the layer is integer (both widths integers), has an integer KV
    with a float activation, or names both 16-bit formats (a TE tile reads one)."""
    qa, kv = n.qbits_activation, n.qbits_kv
    if isinstance(kv, int) and (qa is None or qa in HALF_FLOATS):
        kv = None  # the interpreter reads K / V as they are (KV_UPDATE stored them)
    if kv not in (None, *HALF_FLOATS) or not (qa is None or isinstance(qa, int)
                                               or qa in HALF_FLOATS):
        return None
    q_fmt = qa if qa in HALF_FLOATS else None
    if q_fmt and kv and q_fmt != kv:
        return None
    return q_fmt, kv


def tiled_attention(g: Graph, n: LayerIR) -> bool:
    """ATTENTION layers the compiler tiles (integer Q·K and P·V with 4-, 8- or 16-bit
    activations and 16-, 8- or 4-bit integer K / V from fp32, fp16 or bf16 Q, K, V; or
    float Q·K and P·V
    (`float_formats`) from fp32 Q, K, V; an additive float mask or a constant boolean one,
    an optional soft-cap, except together with KV blocking); the others run whole as a
    layer op."""
    if n.op_type != "ATTENTION":
        return False
    a = node_attrs(n)
    qa, kv = n.qbits_activation, n.qbits_kv
    fp32 = float_formats(n) is not None  # lower/attention_float.py
    softcap = a.softcap or 0.0
    if not ((qa in (4, 8, 16) and kv in (4, 8, 16) or fp32) and softcap >= 0
            and not (softcap and a.kv_block)):
        return False
    # Q, K, V of one float type: fp32, or (integer tiles only) an fp16 / bf16 export's
    dts = {g.tensors[t].dtype for t in n.inputs[:3]}
    if not (dts == {"fp32"} or not fp32 and len(dts) == 1 and dts <= set(HALF_FLOATS)):
        return False
    if fp32 and not a.scale > 0:
        return False
    if len(n.inputs) > 3 and n.inputs[3]:
        m = g.tensors[n.inputs[3]]
        if len(m.shape) != 4 or not (m.dtype == "fp32" or m.dtype == "bool" and m.const
                                     or not fp32 and m.dtype in dts):
            return False
        if fp32 and (m.shape[2] != g.tensors[n.inputs[0]].shape[2]
                     or m.shape[3] < g.tensors[n.inputs[1]].shape[2]):
            return False  # the float tiles read whole (S, T) mask rows
    return True


FLOATS = ("fp32", "fp16", "bf16")


def rope_tileable(g: Graph, n: LayerIR) -> bool:
    """Static conditions under which `lower_rope` tiles the layer (the layout pass folds
    the head transpose into its x load only then): rotate-half over all of D, float
    operands, tables whose halves are equal (constant, or computed so:
    `rope_tables.halves_equal`) and that broadcast to x with x's positions."""
    if n.op_type != "ROPE" or node_attrs(n).interleaved or len(n.inputs) < 3:
        return False
    x, y = g.tensors[n.inputs[0]], g.tensors[n.outputs[0]]
    d = x.shape[-1] if x.shape else 0
    rotary = node_attrs(n).rotary_dim
    if len(x.shape) < 2 or d % 2 or (d if rotary is None else rotary) != d \
            or x.dtype not in FLOATS or y.dtype not in FLOATS or x.shape != y.shape \
            or x.const:
        return False
    for tid in n.inputs[1:3]:
        t = g.tensors[tid]
        if t.dtype not in FLOATS or not t.shape or t.shape[-1] != d \
                or len(t.shape) > len(x.shape) or len(t.shape) < 2:
            return False
        if t.shape[-2] != x.shape[-2] or any(
                c not in (1, xd) for c, xd in zip(t.shape[::-1], x.shape[::-1], strict=False)):
            return False
        if not halves_equal(g, tid):
            return False
    # one entry names one 16-bit float format (`f16_format`): fp16 and bf16 do not mix
    halves = {g.tensors[t].dtype for t in (*n.inputs[:3], n.outputs[0])} & set(HALF_FLOATS)
    return len(halves) <= 1


def copyable(g: Graph, n: LayerIR) -> bool:
    """Static conditions under which `lower_copy` tiles the layer (the layout pass folds a
    head transpose into such a layer's strided reads only then): a copy op of one dtype
    the DMA moves a whole number of bytes of, slices stepping forward."""
    if n.op_type not in COPY_OPS:
        return False
    tids = [t for t in (*n.inputs, *n.outputs) if t]
    dts = {g.tensors[t].dtype for t in tids}
    if len(dts) != 1:
        return False
    dt = dts.pop()
    if dt not in DMA_DTYPES or dtype_bits(dt) % 8 or dt not in ITEMSIZE:
        return False
    if n.op_type == "SLICE":
        return all(int(s) >= 1 for s in node_attrs(n).steps)
    return True


def reads_strided(g: Graph, c: LayerIR, tid: str) -> bool:
    """Does layer `c`'s tiled lowering read tensor `tid` through any strides (so that a
    head transpose producing it can fold into the read)? Tiled ATTENTION (Q, K, V),
    KV_UPDATE's new rows, a tiled ROPE's x, and the tiled copies (lower/copy.py) do."""
    if tiled_attention(g, c) and tid in c.inputs[:3]:
        return True
    if c.op_type == "KV_UPDATE" and c.inputs[1] == tid and node_attrs(c).axis == 2:
        return True
    if rope_tileable(g, c) and c.inputs[0] == tid:
        return True
    return copyable(g, c) and g.tensors[tid].shape[-1] > 1


def rope_output_perm(g: Graph, n: LayerIR,
                     folded: dict[str, FoldKind]) -> tuple[int, ...] | None:
    """The transposed storage of a tiled ROPE's output whose x is a folded head swap: the
    output is stored in x's source order (B, S, H, D) so that a ROPE row holds every head
    of one position (one contiguous load and store per block of positions), and its
    consumers, which all read through strides, see (B, H, S, D). None: stored as is."""
    if not rope_tileable(g, n):
        return None
    src = g.tensors[n.inputs[0]].producer
    y = n.outputs[0]
    t = g.tensors[y]
    if src is None or folded.get(src) != "read" or y in g.outputs or not t.consumers:
        return None
    if not all(reads_strided(g, g.node(c), y) for c in t.consumers):
        return None
    return tuple(int(p) for p in node_attrs(g.node(src)).perm)


def fold_kind(g: Graph, n: LayerIR) -> FoldKind | None:
    """How a head transpose folds into its neighbours' DMAs, or None if it stays a layer."""
    if not is_head_swap(n) or node_attrs(n).view:
        return None
    out = g.tensors[n.outputs[0]]
    src = g.tensors[n.inputs[0]]
    consumers = [g.node(c) for c in out.consumers]
    if consumers and out.id not in g.outputs and all(
        reads_strided(g, c, out.id) for c in consumers
    ):
        return "read"      # consumers read the source with strides
    if (src.producer and tiled_attention(g, g.node(src.producer))
            and src.consumers == [n.id] and src.id not in g.outputs):
        return "write"     # attention writes straight into the output
    return None


@dataclass(frozen=True)
class FoldTransposes:
    """Mark (0, 2, 1, 3) transposes next to ATTENTION / KV_UPDATE / ROPE / copies as
    strided views."""

    name: str = "layout"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ()

    def apply(self, state: CompileState) -> CompileState:
        folded: dict[str, FoldKind] = {}
        for n in state.graph.nodes:
            kind = fold_kind(state.graph, n)
            if kind is not None:
                folded[n.id] = kind
        state.folded = folded
        if folded:
            state.notes.append(f"layout: {len(folded)} head transposes folded into DMAs")
        state.stored_permuted = {}
        for n in state.graph.nodes:
            perm = rope_output_perm(state.graph, n, folded)
            if perm is not None:
                state.stored_permuted[n.outputs[0]] = perm
        return state
