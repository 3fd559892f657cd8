"""GEMM and QKV_PROJ: array-aligned output tiles with a K loop and an epilogue.

The activation is first made what the tensor engine reads, once per (tensor, format)
however many layers read it: quantized (VE_QUANTIZE, static scale) or cast (VE_COPY to
fp16) into an HBM scratch, or read as it is (fp32 mode, fp16 already, int8 data behind a
per-tensor DEQUANTIZE). The weight is stored at its own bits (int8, int4 packed, fp16,
fp32) once per (weight, mode, bits). Output tiles (tm × tn, `kernbench.compiler.tiling`)
go round-robin over PEs; on each PE two tiles' K loops interleave (DMA A, DMA W, TE_GEMM
accumulating), so one tile's fetch, store and command round trip hide behind the other's
compute; then the epilogue VE_DEQUANTIZE (per-column scale s_x·s_w, bias) runs in place
and a 2-D DMA stores the tile.
"""

from __future__ import annotations

import math

import numpy as np

from kernbench.compiler.hbm import ITEMSIZE, Placement
from kernbench.compiler.lower.context import QBITS_OF, Lowering, PreparedX, TeWeight
from kernbench.compiler.lower.epilogue import FusedStep, apply_step, drop_fused, fusable_step
from kernbench.compiler.quantize import int8_dequant_source
from kernbench.compiler.tilegraph import Buf
from kernbench.compiler.tiling import GemmTiles, choose_gemm_tiles
from kernbench.ir.model import LayerIR, is_shape_only_array
from kernbench.numerics import quant as qmath
from kernbench.topology import peaks

#: an output tile: (first row, first column, rows, columns)
OutTile = tuple[int, int, int, int]


def te_mode(n: LayerIR) -> str | None:
    """How a TE layer is tiled: "int" (A8 with W8 / W4), "fp16", "fp32"; None: the layer
    runs whole as a layer op (e.g. A4 or W2, which the tiles do not pack)."""
    qa, qw = n.qbits_activation, n.qbits_weight
    if qa == 8 and qw in (8, 4, None):
        return "int"
    if qa == "fp16" and qw in ("fp16", None):
        return "fp16"
    if qa is None and qw is None:
        return "fp32"
    return None


def dequant_bypassed(lw: Lowering, n: LayerIR) -> bool:
    """A DEQUANTIZE whose every consumer is an integer TE layer reading the int8 source
    directly (see `prepare_x`) needs no operation of its own."""
    if n.op_type != "DEQUANTIZE":
        return False
    g = lw.g
    out = n.outputs[0]
    t = g.tensors[out]
    if out in g.outputs or t.quant is None or not t.consumers:
        return False
    if int8_dequant_source(g, out) is None:
        return False
    return all(g.node(c).op_type in ("GEMM", "QKV_PROJ") and g.node(c).inputs[0] == out
               and te_mode(g.node(c)) == "int" for c in t.consumers)


# ----------------------------------------------------------------------------- weights


def te_weight(lw: Lowering, n: LayerIR, w_tid: str, mode: str) -> TeWeight | None:
    """The weight as stored for the tiles, computed once per (weight, mode, bits): checking
    a layer and lowering it both ask. None: the weight cannot be tiled."""
    key = (w_tid, mode, n.qbits_weight)
    if key not in lw.weights:
        lw.weights[key] = _te_weight_once(lw, n, w_tid, mode)
    return lw.weights[key]


def _int_weight(lw: Lowering, n: LayerIR, w_tid: str,
                w: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(int values, scale, bits) of an imported integer weight or of one the compiler
    quantizes (symmetric, per channel unless the qconfig says per tensor)."""
    t = lw.g.tensors[w_tid]
    if t.quant is not None:
        q = t.quant
        zp = lw.g.weights.get(q.zero_point) if q.zero_point else None
        if q.block_size or (zp is not None and np.any(np.asarray(zp) != 0)):
            return None
        if q.axis is not None and q.axis % 2 != 1:
            return None
        bits = int(q.dtype.lstrip("uint"))
        if q.dtype.startswith("u") or bits not in (4, 8):
            return None
        return w.astype(np.int8), np.asarray(lw.g.weights[q.scale], np.float32), bits
    bits = n.qbits_weight if isinstance(n.qbits_weight, int) else 8
    if bits not in (4, 8):
        return None
    wq, sw = qmath.quantize_weight(w.astype(np.float32), bits,
                                   -1 if lw.per_channel else None)
    return wq, np.asarray(sw, np.float32), bits


def _te_weight_once(lw: Lowering, n: LayerIR, w_tid: str, mode: str) -> TeWeight | None:
    w = np.asarray(lw.g.weights[w_tid])
    if w.ndim != 2:
        return None
    if is_shape_only_array(w):
        return _shape_only_weight(lw, n, w_tid, w, mode)
    if mode == "int":
        iw = _int_weight(lw, n, w_tid, w)
        if iw is None:
            return None
        wq, sw, bits = iw
        dt = "int4" if bits == 4 else "int8"
        data = qmath.pack_int4(wq) if bits == 4 else wq.astype(np.int8)
        p = lw.const(f"{w_tid}@int{bits}", np.asarray(data), dt, source=w_tid,
                     shape=tuple(w.shape))
        return TeWeight(p, sw, bits)
    if mode == "fp16":
        arr = qmath.round_to_float(w.astype(np.float32), "fp16").astype(np.float16)
        return TeWeight(lw.const(f"{w_tid}@fp16", arr, "fp16", source=w_tid), None, 16)
    return TeWeight(lw.const(f"{w_tid}@fp32", w.astype(np.float32), "fp32", source=w_tid),
                    None, 32)


def _shape_only_weight(lw: Lowering, n: LayerIR, w_tid: str, w: np.ndarray,
                       mode: str) -> TeWeight | None:
    """A shape-only model's weight: placed at its stored bits, no values (unit scales)."""
    if mode == "int":
        bits = n.qbits_weight if isinstance(n.qbits_weight, int) else 8
        if bits not in (4, 8) or lw.g.tensors[w_tid].quant is not None:
            return None
        dt = "int4" if bits == 4 else "int8"
        p = lw.const(f"{w_tid}@int{bits}", None, dt, source=w_tid, shape=tuple(w.shape))
        return TeWeight(p, np.ones((w.shape[1],), np.float32), bits)
    dt, bits = ("fp16", 16) if mode == "fp16" else ("fp32", 32)
    return TeWeight(lw.const(f"{w_tid}@{dt}", None, dt, source=w_tid, shape=tuple(w.shape)),
                    None, bits)


# ----------------------------------------------------------------------------- activations


def prepare_x(lw: Lowering, n: LayerIR, x_tid: str, mode: str, bits: int) -> PreparedX | None:
    """The activation as the TE reads it: quantized / cast into an HBM scratch, once per
    (tensor, format) however many layers read it."""
    key = (x_tid, mode, bits)
    if key not in lw.prepared:
        lw.prepared[key] = _prepare_x_once(lw, n, x_tid, mode, bits)
    return lw.prepared[key]


def _read_as_is(lw: Lowering, x_tid: str, mode: str) -> PreparedX | str | None:
    """A PreparedX when the TE reads the activation's HBM data directly; else the
    converted dtype to make ("int8", "fp16"), or None when it cannot be tiled."""
    g = lw.g
    if mode == "int":
        dq = int8_dequant_source(g, x_tid)
        if dq is not None and g.tensors[x_tid].quant is not None:
            src = lw.placement(dq[0])
            if src.contiguous:  # int8 data already in HBM: the TE reads it directly
                k = src.shape[-1]
                m = int(np.prod(src.shape[:-1]))
                sx = np.asarray(g.weights[dq[1]], np.float32).reshape(())
                return PreparedX(Placement(src.key, src.addr, (m, k), (k, 1), "int8",
                                           src.replicas), sx)
    xp = lw.placement(x_tid)
    if not xp.contiguous:
        return None
    k = xp.shape[-1]
    m = int(np.prod(xp.shape[:-1]))
    if mode == "fp16" and xp.dtype == "fp16":  # already fp16 in HBM
        return PreparedX(Placement(xp.key, xp.addr, (m, k), (k, 1), "fp16", xp.replicas), None)
    if xp.dtype != "fp32":
        return None
    if mode == "fp32":
        return PreparedX(Placement(xp.key, xp.addr, (m, k), (k, 1), "fp32", xp.replicas), None)
    return "int8" if mode == "int" else "fp16"


def _static_scale(lw: Lowering, x_tid: str) -> np.ndarray | None:
    """The activation's static symmetric scale, or None if it has none (or a zero point)."""
    t = lw.g.tensors[x_tid]
    if t.quant is None:
        return None
    sx = np.asarray(lw.g.weights[t.quant.scale], np.float32).reshape(())
    zp = (np.asarray(lw.g.weights[t.quant.zero_point]).reshape(())
          if t.quant.zero_point else np.zeros((), np.int8))
    if int(zp) != 0 or t.quant.dtype.startswith("u"):
        return None
    return sx


def _prepare_x_once(lw: Lowering, n: LayerIR, x_tid: str, mode: str,
                    bits: int) -> PreparedX | None:
    how = _read_as_is(lw, x_tid, mode)
    if how is None or isinstance(how, PreparedX):
        return how
    xp = lw.placement(x_tid)
    k = xp.shape[-1]
    m = int(np.prod(xp.shape[:-1]))
    sx = None
    if mode == "int":
        sx = _static_scale(lw, x_tid)
        if sx is None:
            return None
    out_dt = how
    a = lw.plan.allocate(f"{x_tid}@{out_dt}", (m, k), out_dt, "scratch", source=x_tid)
    out = Placement(a.key, a.addrs[0], (m, k), (k, 1), out_dt)
    split = lw.engines.ve_blocks(m, k, lw.n_pes, "quantize" if mode == "int" else "copy")
    rows = max(1, min(m, lw.bank // (k * 4), math.ceil(m / (lw.n_pes * split))))
    for r0 in range(0, m, rows):
        r = min(rows, m - r0)
        pe = lw.next_pe()
        bi = lw.buf(pe, r * k * 4, f"{n.id}.x32")
        bo = lw.buf(pe, r * k * ITEMSIZE[out_dt], f"{n.id}.xq")
        lw.dma(False, pe, bi, xp, r0 * k, 1, r * k, r * k, n.id)
        ve = lw.engines.ve(pe)
        if mode == "int":
            lw.op("VE_QUANTIZE_TILE", pe, n.id,
                  {"length": k, "rows": r, "qbits_activation": 32, "out_qbits": bits,
                   "scale": float(sx), "zero_point": 0, **ve},
                  reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
        else:
            lw.op("VE_COPY_TILE", pe, n.id, {"length": k, "rows": r,
                                             "qbits_activation": 32, "out_qbits": 16, **ve},
                  reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
        lw.dma(True, pe, bo, out, r0 * k, 1, r * k, r * k, n.id, frees=[bo])
    lw.phase()
    return PreparedX(out, sx)


# ----------------------------------------------------------------------------- tiles


def _epilogue_consts(lw: Lowering, n: LayerIR, sx: np.ndarray | None, sw: np.ndarray | None,
                     b_tid: str | None, out_tid: str, nn: int,
                     mode: str) -> tuple[Placement, Placement | None]:
    """Epilogue constants: the scale vector (s_x·s_w, ones for float modes) and the bias,
    fp32 [N]."""
    if mode == "int":
        sw_b = sw.reshape(()) if sw.ndim == 0 or sw.size == 1 else sw.reshape(-1)
        scale = (np.asarray(sx, np.float32) * sw_b).astype(np.float32)
        scale = np.broadcast_to(scale, (nn,)).astype(np.float32)
    else:
        scale = np.ones((nn,), np.float32)
    sp = lw.const(f"{n.id}:{out_tid}@scale", scale, "fp32")
    bp = None
    if b_tid:
        bias = np.asarray(lw.g.weights[b_tid], np.float32).reshape(-1)
        bp = lw.const(f"{b_tid}@fp32", bias, "fp32", source=b_tid)
    return sp, bp


def _tiles_per_pe(lw: Lowering, m: int, nn: int, t: GemmTiles) -> dict[int, list[OutTile]]:
    """Output tiles round-robin over PEs."""
    per_pe: dict[int, list[OutTile]] = {}
    for m0 in range(0, m, t.tm):
        for n0 in range(0, nn, t.tn):
            per_pe.setdefault(lw.next_pe(), []).append(
                (m0, n0, min(t.tm, m - m0), min(t.tn, nn - n0)))
    return per_pe


def _k_loops(lw: Lowering, n: LayerIR, pe: int, group: list[OutTile], accs: list[Buf],
             xq: Placement, wp: TeWeight, t: GemmTiles, k: int, nn: int) -> None:
    """The interleaved K loops of a group of output tiles on one PE; the j-th tile of
    the group runs on tensor engine j mod count (its whole K loop: the partial sums stay
    on that engine)."""
    ab, wb = ITEMSIZE[xq.dtype], ITEMSIZE[wp.placement.dtype]
    qa_bits = {"int8": 8, "fp16": 16, "fp32": 32}[xq.dtype]
    for i, k0 in enumerate(range(0, k, t.tk)):
        tk = min(t.tk, k - k0)
        for j, ((m0, n0, tm, tn), c) in enumerate(zip(group, accs, strict=True)):
            ba = lw.buf(pe, tm * tk * ab, f"{n.id}.a")
            bw = lw.buf(pe, tk * tn * wb, f"{n.id}.w")
            lw.dma(False, pe, ba, xq, m0 * k + k0, tm, tk, k, n.id)
            lw.dma(False, pe, bw, wp.placement, k0 * nn + n0, tk, tn, nn, n.id, role="weight")
            lw.op("TE_GEMM_TILE", pe, n.id,
                  {"m": tm, "n": tn, "k": tk, "qbits_weight": wp.bits,
                   "qbits_activation": qa_bits, "ofm_qbits": 32, "accumulate": i > 0,
                   **lw.engines.te(j)},
                  reads=[("ifm", ba), ("wgt", bw)] + ([("ofm", c)] if i else []),
                  writes=[("ofm", c)], frees=[ba, bw])


def _epilogue(lw: Lowering, n: LayerIR, pe: int, c: Buf, consts: tuple[Placement,
              Placement | None], op: Placement, tile: OutTile, nn: int, mode: str,
              step: FusedStep | None) -> None:
    """Scale (and bias) the accumulator tile into the output dtype, apply a fused
    consumer (`kernbench.compiler.lower.epilogue`) and store it."""
    sp, bp = consts
    m0, n0, tm, tn = tile
    bs = lw.buf(pe, tn * 4, f"{n.id}.scale")
    lw.dma(False, pe, bs, sp, n0, 1, tn, tn, n.id, role="weight")
    reads = [("in", c), ("scale", bs)]
    frees = [c, bs]
    if bp is not None:
        bb = lw.buf(pe, tn * 4, f"{n.id}.bias")
        lw.dma(False, pe, bb, bp, n0, 1, tn, tn, n.id, role="weight")
        reads.append(("bias", bb))
        frees.append(bb)
    engine = lw.engines.ve(pe)
    # in place: the result overwrites the accumulator it is computed from
    lw.op("VE_DEQUANTIZE_TILE", pe, n.id,
          {"length": tn, "rows": tm, "qbits_activation": 32, "out_qbits": QBITS_OF[op.dtype],
           "in_dtype": "int32" if mode == "int" else "float32", **engine},
          reads=reads, writes=[("out", c)], frees=frees[1:])
    if step is None:
        lw.dma(True, pe, c, op, m0 * nn + n0, tm, tn, nn, n.id, frees=[c])
        return
    apply_step(lw, step, pe, c, tile, nn, n.id, engine)
    st = lw.dma(True, pe, c, step.out, m0 * nn + n0, tm, tn, nn, step.layer.id, frees=[c])
    st.fused_into = n.id


def _dma_fixed_ns(lw: Lowering) -> float:
    """The fixed cost of one HBM transfer of a PE's DMA: setup and the HBM latency."""
    cube = lw.topo.config.cube
    dma = cube.pe_template.pe_dma
    return dma.setup_cycles / dma.clock_ghz + cube.hbm_ctrl.latency_ns


def gemm(lw: Lowering, n: LayerIR, x: PreparedX, w_tid: str, b_tid: str | None,
         out_tid: str, mode: str, fuse: bool = False) -> bool:
    """Tile out = x · w (+ b); False when the weight or the output cannot be tiled.
    `fuse`: apply the output's element-wise consumer in the epilogue when it can."""
    wp = te_weight(lw, n, w_tid, mode)
    if wp is None:
        return False
    xq, sx = x
    k, nn = wp.placement.shape
    m = xq.shape[0]
    op = lw.plan.placements[out_tid]
    if not op.contiguous or op.dtype not in ("fp32", "fp16") \
            or int(np.prod(op.shape)) != m * nn:
        return False
    step = fusable_step(lw, n, out_tid, op, nn) if fuse else None
    consts = _epilogue_consts(lw, n, sx, wp.scale, b_tid, out_tid, nn, mode)
    g = lw.gemm_spec
    t = choose_gemm_tiles(m, nn, k, a_bytes=ITEMSIZE[xq.dtype],
                          w_bytes=ITEMSIZE[wp.placement.dtype], bank_bytes=lw.bank,
                          tcm_bytes=lw.tcm_bytes, rows=g.rows, cols=g.cols,
                          dataflow=g.dataflow, n_pes=lw.n_pes, engines=lw.engines.te_count,
                          hbm_bytes_per_cycle=peaks.hbm_gbs(lw.topo) / g.clock_ghz,
                          dma_fixed_cycles=_dma_fixed_ns(lw) * g.clock_ghz)
    per_pe = _tiles_per_pe(lw, m, nn, t)
    # two accumulators per tensor engine interleave their K loops (one hides the other's
    # fetch, store and command round trip); a single K step needs no partner
    width = (2 if len(range(0, k, t.tk)) > 1 else 1) * lw.engines.te_count
    for pe in sorted(per_pe):
        tiles = per_pe[pe]
        for g0 in range(0, len(tiles), width):
            group = tiles[g0:g0 + width]
            accs = [lw.buf(pe, tm * tn * 4, f"{n.id}.acc") for _, _, tm, tn in group]
            _k_loops(lw, n, pe, group, accs, xq, wp, t, k, nn)
            for tile, c in zip(group, accs, strict=True):
                _epilogue(lw, n, pe, c, consts, op, tile, nn, mode, step)
    if step is not None:
        drop_fused(lw, n, out_tid, step)
    return True


def _te_inputs(lw: Lowering, n: LayerIR, weights: list[str]) -> tuple[str, PreparedX] | None:
    """(mode, prepared activation) when the layer can be tiled, else None."""
    mode = te_mode(n)
    if mode is None or not all(lw.g.tensors[t].const for t in weights):
        return None
    if any(te_weight(lw, n, w, mode) is None for w in weights):
        return None
    bits = n.qbits_activation if mode == "int" else 16
    prep = prepare_x(lw, n, n.inputs[0], mode, bits)
    return None if prep is None else (mode, prep)


def lower_gemm(lw: Lowering, n: LayerIR) -> bool:
    te = _te_inputs(lw, n, [n.inputs[1]])
    if te is None:
        return False
    mode, x = te
    b = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else None
    return gemm(lw, n, x, n.inputs[1], b, n.outputs[0], mode, fuse=True)


def lower_qkv_proj(lw: Lowering, n: LayerIR) -> bool:
    te = _te_inputs(lw, n, n.inputs[1:4])
    if te is None:
        return False
    mode, x = te
    for j in range(3):
        b = n.inputs[4 + j] if len(n.inputs) > 4 + j and n.inputs[4 + j] else None
        if not gemm(lw, n, x, n.inputs[1 + j], b, n.outputs[j], mode):
            raise ValueError(f"{n.id}: projection {j} cannot be tiled")
    return True
