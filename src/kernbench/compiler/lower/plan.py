"""The lowering plan: the decisions that span several IR ops, made before any op is tiled.

The `plan` pass (`plan_pass.Plan`) writes one `LoweringPlan` into the compile state; the
`tiling` pass reads it and decides nothing of this kind itself. The plan is plain, frozen
data (its tables are read-only mappings), so a lowering can read it but not write it, and
`dump()` renders it for `--dump-after plan`.

Fields:
- `te_weights`: the weight of every tensor-engine layer as the tiles read it, by (weight
  tensor, TE mode, the layer's weight bits): quantized once (or cast) however many layers
  read it; None when it cannot be tiled (the layer then runs whole). Its storage in HBM is
  placed by the tile that first reads it (`te_weights.weight_tile`), in program order.
- `read_through`: the head transposes a later QDQ reads through (transpose node → QDQ
  node): they get no operation of their own (`qdq`).
- `dynamic_quantize`: the DYNAMIC_QUANTIZE layers the tiles compute (`dynq`);
  `integer_matmuls`: the MATMUL_INTEGER layers reading them, each with its re-centered
  weight and the Cast and Mul its epilogue computes. Their run-time scratches are
  allocated by the DYNAMIC_QUANTIZE's tiles and found in the memory plan by key.
- `epilogue`: the consumer a GEMM's (or a tiled MATMUL_INTEGER's) epilogue applies, by
  that layer: a GELU / SILU, or an ADD of a residual, read through views (`epilogue`).
- `kv_stores`: the int8 Q / K / V copies a projection's epilogue stores for the integer
  attention that reads them (projection output → `KvStore`; `xquant`); the scratch is
  allocated by the projection's tiles and the attention finds it by key.
- `quant_stores`: the float activations their producer (a row-wise layer, a GEMM epilogue's
  fused consumer, a GEMM that row-reduces a norm, an integer attention) also stores
  quantized for the integer GEMMs that read them (tensor → `QuantStore`; `xquant`); the
  producer's tiles allocate the scratch and the GEMMs find it in the memory plan by key.
- `kv_rows`: the projections that store their new K / V rows straight into the present
  cache (projection output → `KvRows`, naming the KV_UPDATE, which then copies only the
  past; `kv_rows`).
- `written_through`: the head transposes a QDQ writes its output through (transpose node →
  QDQ node): the QDQ's tiles store the transposed output, so they get no operation (`qdq`).
- `clamps`: the ReLU / Clip a tiled conv's epilogue applies (conv node → clamp node;
  `conv_plan.planned_clamp`): the conv's tiles store the clamped block into the clamp's
  output.
- `norms`: the norm after a one-row GEMM's fused epilogue step (GEMM node → `NormAfter`;
  `gemm_rowreduce.planned_norm`): the GEMM's K parts a tile, cut from the shapes
  (`gemm_parts.range_tiles`), and whether one PE adds the row up and runs the norm
  (`reduced`). The GEMM's tiles read the norm's row spec either way.
- `lone`: the layers that run as one tile (a small element-wise op or gather) → the PE
  it runs on: per cube the next of its PEs, in a rotation across layers (`lone_plan`).
- `whole`: the layers that run as one whole-layer op on one PE (no tiled lowering takes
  them; `whole_plan`).
- `pins`: the storages pinned whole to one cube (`CompileState.pinned`) → the layer run
  whole that touched it while it was spread, in the round of the plan pass that pinned it
  (`whole_plan`; the memory is planned again after each round).
- `first_pe`: on one cube, every layer with an op of its own → the PE its first tile
  goes to: the round-robin carries across layers, so it is the PEs the layers before it
  drew, modulo the PEs (`pe_draws`); the tiling pass starts each layer's cursor there.
  Empty on several cubes, where every layer starts at PE 0.
- `fused`: layers computed by another layer's tiles (layer → that layer): a tiled
  MATMUL_INTEGER's Cast and Mul, an epilogue's consumer, a conv's clamp, a row-reduced
  norm, and the views of a tensor no tile writes (each → the producer of that tensor).
  They get no operation of their own.
- `unwritten`: the float tensors no tile writes (a fused GEMM's output, an activation
  read only as its quantized copy, a projection output stored only as int8 Q / K / V or
  as KV rows) and the views of them on the way to their readers. Their producer's tiles
  drop their storage (`Lowering.forget`); a float read of one after that is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kernbench.compiler.lower.values import (
    FusedStep,
    IntegerMatmul,
    KvRows,
    KvStore,
    NormAfter,
    QuantStore,
    TeWeight,
)
from kernbench.ir.model import QBits

#: (weight tensor, TE mode, the layer's weight bits)
WeightKey = tuple[str, str, QBits]


@dataclass(frozen=True)
class LoweringPlan:
    """The cross-op decisions of one compile (module docstring)."""

    te_weights: Mapping[WeightKey, TeWeight | None]
    read_through: Mapping[str, str]
    dynamic_quantize: frozenset[str]
    integer_matmuls: Mapping[str, IntegerMatmul]
    epilogue: Mapping[str, FusedStep]
    kv_stores: Mapping[str, KvStore]
    kv_rows: Mapping[str, KvRows]
    fused: Mapping[str, str]
    quant_stores: Mapping[str, QuantStore]
    written_through: Mapping[str, str]
    unwritten: frozenset[str]
    clamps: Mapping[str, str]
    norms: Mapping[str, NormAfter]
    lone: Mapping[str, int]
    whole: frozenset[str] = frozenset()
    pins: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    first_pe: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def feeds_kv_update(self, node: str) -> bool:
        """Does a projection store the new rows of KV_UPDATE `node` (it copies the past)?"""
        return any(kr.update == node for kr in self.kv_rows.values())

    def computed_elsewhere(self, node: str) -> bool:
        """Do other layers' tiles compute layer `node` (it gets no operation)?"""
        return node in self.fused or node in self.read_through \
            or node in self.written_through

    def quant_stored(self, tid: str) -> QuantStore | None:
        """The quantized store of the activation GEMMs read as `tid`, when its producer
        makes it (`quant_stores`), else None."""
        return next((qs for qs in self.quant_stores.values() if qs.read_as == tid), None)

    def te_weight(self, key: WeightKey) -> TeWeight | None:
        """The planned TE weight of `key`; a key the plan pass did not see is a bug."""
        try:
            return self.te_weights[key]
        except KeyError:
            raise RuntimeError(f"lowering plan: no TE weight planned for {key}") from None

    def dump(self) -> str:
        """The plan, one decision a line, in a stable order."""
        lines = ["lowering plan:", "  te_weights:"]
        for (w, mode, bits), wp in sorted(self.te_weights.items(),
                                          key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]))):
            lines.append(f"    {w} {mode} w{bits}: " + _weight_line(wp))
        lines.append("  read_through (transpose -> the QDQ reading through it):")
        lines += [f"    {t} -> {q}" for t, q in sorted(self.read_through.items())]
        lines.append("  written_through (transpose -> the QDQ writing its output through it):")
        lines += [f"    {t} -> {q}" for t, q in sorted(self.written_through.items())]
        lines.append("  dynamic_quantize (tiled):")
        lines += [f"    {d}" for d in sorted(self.dynamic_quantize)]
        lines.append("  integer_matmuls:")
        lines += [f"    {m}: weight [{im.weight.shape[0]}, {im.weight.shape[1]}] int8, epilogue "
                  f"{im.cast.id} + {im.mul.id} (scale {im.scale_tid}) -> {im.out_tid}"
                  for m, im in sorted(self.integer_matmuls.items())]
        lines.append("  epilogue (GEMM -> the consumer its epilogue applies):")
        lines += [f"    {m} -> {st.layer.id} ({_step_line(st)})"
                  for m, st in sorted(self.epilogue.items())]
        lines.append("  kv_stores (projection output -> the int8 copy an attention reads):")
        lines += [f"    {t} -> {ks.view} (scale {ks.scale:.6g}"
                  + (f", cut in {len(ks.cuts)} parts" if ks.cuts else "")
                  + (", float not stored)" if ks.unread else ")")
                  for t, ks in sorted(self.kv_stores.items())]
        lines.append("  kv_rows (projection output -> the KV_UPDATE whose new rows it stores):")
        lines += [f"    {t} -> {kr.update} (rows from {kr.first_row} of {kr.present.key}"
                  + (f", scale {kr.scale:.6g})" if kr.scale is not None else ")")
                  for t, kr in sorted(self.kv_rows.items())]
        lines.append("  quant_stores (activation -> stored quantized by its producer too):")
        lines += [f"    {t} -> {qs.read_as}: int{qs.bits}, scale {float(qs.scale):.6g}, zero point "
                  f"{qs.zero_point}" + (", float not stored" if qs.unread else "")
                  for t, qs in sorted(self.quant_stores.items())]
        lines.append("  clamps (conv -> the ReLU / Clip its epilogue applies):")
        lines += [f"    {c} -> {r}" for c, r in sorted(self.clamps.items())]
        lines.append("  norms (one-row GEMM -> the norm after its epilogue; row-reduced: one PE "
                     "adds the row up and runs it):")
        lines += [f"    {m} -> {na.norm}, {na.parts} K part(s) a tile, "
                  + ("row-reduced" if na.reduced else "not row-reduced")
                  for m, na in sorted(self.norms.items())]
        lines.append("  lone (layer of one tile -> its PE, a rotation per cube):")
        lines += [f"    {layer} -> pe{pe}" for layer, pe in sorted(self.lone.items())]
        lines.append("  whole (layers run as one whole-layer op):")
        lines += [f"    {layer}" for layer in sorted(self.whole)]
        lines.append("  pins (storage pinned to one cube -> the layer run whole that needed it):")
        lines += [f"    {key} -> {layer}" for key, layer in sorted(self.pins.items())]
        lines.append("  first_pe (layer -> the PE its first tile goes to, one cube):")
        lines += [f"    {layer} -> pe{pe}" for layer, pe in self.first_pe.items()]
        lines.append("  fused (layer -> the layer whose tiles compute it):")
        lines += [f"    {c} -> {p}" for c, p in sorted(self.fused.items())]
        lines.append("  unwritten (float tensors no tile writes):")
        lines += [f"    {t}" for t in sorted(self.unwritten)]
        return "\n".join(lines)


def _step_line(st: FusedStep) -> str:
    what = st.layer.op_type
    if st.in2_tid is not None:
        what += f" of residual {st.in2_tid} ({'per row' if st.in2_per_row else 'one row'})"
    views = f", through {', '.join(st.chain[1:])}" if len(st.chain) > 1 else ""
    return f"{what}, stored {st.out.dtype} in {st.out.key}{views}"


def _weight_line(wp: TeWeight | None) -> str:
    if wp is None:
        return "not tiled (the layer runs whole)"
    if wp.scale is None:
        scale = "no scale"
    else:
        scale = "per-tensor scale" if wp.scale.size == 1 else f"{wp.scale.size} column scales"
    data = "" if wp.values is None or wp.values.data is not None else ", shape only"
    dims = ", ".join(str(d) for d in wp.shape)  # [K, N]; a conv weight's OIHW
    return f"{wp.dtype} [{dims}], {wp.bits} bits, {scale}{data}"
