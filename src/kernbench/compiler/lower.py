"""Tiling pass: every IR layer becomes tile operations on PEs (the TileGraph).

Lowered tile by tile (data semantics per tile, see docs/compiler.md):
- GEMM / QKV_PROJ: the activation is first quantized (VE_QUANTIZE, static scale) or cast
  (VE_COPY to fp16) into an HBM scratch tensor; then every (tm × tn) output tile runs a
  K loop of DMA_LOAD A, DMA_LOAD W, TE_GEMM (accumulating), and an epilogue
  VE_DEQUANTIZE (per-column scale vector, bias) and DMA_STORE.
- ATTENTION (integer mode): per (batch, KV group) K and V are loaded and quantized once;
  per query head and row block: Q load + quantize, TE scores = Q·Kᵀ, VE_DEQUANTIZE,
  VE_SOFTMAX with the mask and causal offset, VE_QUANTIZE P, TE P·V, VE_DEQUANTIZE, store.
- LAYER_NORM, RMS_NORM, SOFTMAX, GELU, SILU, ADD, MUL on the last axis: row blocks.
- KV_UPDATE: DMA copies of past and new rows into the present cache.
- Views take no operation. Everything else runs whole on one PE as VE_LAYER_OP /
  TE_LAYER_OP (a tensor-engine layer for CONV and integer matmuls).
Placement: tiles go round-robin over all PEs (a single counter across layers, so small
layers spread too); the K loop of one output tile stays on one PE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernbench.compiler.memory_plan import (
    ITEMSIZE,
    Placement,
    tiled_attention,
)
from kernbench.compiler.state import CompileState
from kernbench.compiler.tilegraph import Buf, TileGraph, TileOp
from kernbench.compiler.tiling import choose_gemm_tiles
from kernbench.ir.model import is_shape_only_array
from kernbench.numerics import quant as qmath

QBITS_OF = {"fp32": 32, "fp16": 16, "bf16": 16, "int8": 8, "uint8": 8, "int4": 4, "int32": 32,
            "bool": 8, "int16": 16}
TE_LAYER_OPS = ("CONV", "MATMUL", "MATMUL_INTEGER", "QLINEAR_MATMUL", "GEMM", "QKV_PROJ",
                "ATTENTION")
ROW_OPS = {"LAYER_NORM": "VE_LAYERNORM_TILE", "RMS_NORM": "VE_RMSNORM_TILE",
           "SOFTMAX": "VE_SOFTMAX_TILE", "GELU": "VE_GELU_TILE", "SILU": "VE_SILU_TILE",
           "ADD": "VE_ADD_TILE", "MUL": "VE_MUL_TILE"}


class Lowerer:
    def __init__(self, state: CompileState) -> None:
        self.state = state
        self.g = state.graph
        self.topo = state.topology
        self.plan = state.memory
        pt = self.topo.config.cube.pe_template
        self.gemm_spec = pt.pe_gemm
        tcm = pt.pe_tcm
        self.bank = tcm.capacity_kib * 1024 // tcm.banks
        self.tcm_bytes = (tcm.capacity_kib - tcm.reserved_kib) * 1024
        self.n_pes = len(self.topo.pes)
        self.tg = TileGraph()
        self._rr = 0
        self._stream = 0
        #: on a multi-cube NPU every layer's tiles start again at PE 0 (cube 0, where
        #: activations live): a small layer stays near its data, a big one still spreads
        #: over all PEs. (Measured: tiny GPT-2 on base 24.7 → 17.0 µs; on one cube a
        #: counter that rotates across layers balances the PEs better.)
        self.restart_placement = len(self.topo.cubes) > 1
        self._prepared: dict[tuple[str, str, int], Any] = {}
        self._weights: dict[tuple[str, str, Any], Any] = {}
        self._per_channel = (self.g.qconfig or {}).get("weight_granularity",
                                                      "per_channel") == "per_channel"

    # ------------------------------------------------------------------ helpers
    def next_pe(self) -> int:
        pe = self._rr % self.n_pes
        self._rr += 1
        return pe

    def phase(self) -> None:
        """Ops after this point may depend on any op before it (placement keeps order)."""
        self._stream += 1

    def cube(self, pe: int) -> int:
        return self.topo.pes[pe].cube.index

    def buf(self, pe: int, nbytes: int, label: str) -> Buf:
        b = Buf(len(self.tg.bufs), pe, max(int(math.ceil(nbytes)), 1), label)
        if b.nbytes > self.bank:
            raise ValueError(f"{label}: {b.nbytes} B does not fit a {self.bank}-byte TCM bank")
        self.tg.bufs.append(b)
        return b

    def op(self, opcode: str, pe: int, layer: str, fields: dict[str, Any], *, reads=(),
           writes=(), hbm_reads=(), hbm_writes=(), frees=()) -> TileOp:
        o = TileOp(opcode, pe, layer, fields, list(reads), list(writes), list(hbm_reads),
                   list(hbm_writes), list(frees), self._stream)
        self.tg.ops.append(o)
        self.tg.layer_tiles[layer] = self.tg.layer_tiles.get(layer, 0) + 1
        return o

    @staticmethod
    def _range(p: Placement, elem_off: int, rows: int, row_elems: int,
               row_stride: int) -> tuple[str, int, int, int, int]:
        """(storage key, first byte, end of hull, row stride, row bytes): a strided range
        exact enough that two column blocks of the same rows do not look overlapping."""
        isz = ITEMSIZE[p.dtype]
        start = p.addr + int(elem_off * isz)
        end = p.addr + int(math.ceil((elem_off + (rows - 1) * row_stride + row_elems) * isz))
        if rows == 1 or row_stride == row_elems:
            return (p.key, start, end, end - start, end - start)
        return (p.key, start, end, int(row_stride * isz), int(math.ceil(row_elems * isz)))

    def dma(self, write: bool, pe: int, b: Buf, p: Placement, elem_off: int, rows: int,
            row_elems: int, row_stride: int, layer: str, role: str = "activation",
            frees=()) -> TileOp:  # noqa: ANN001
        isz = ITEMSIZE[p.dtype]
        fields = {"tensor_role": role, "qbits": QBITS_OF[p.dtype],
                  "dram_addr": p.addr_in(self.cube(pe)) + int(elem_off * isz),
                  "num_elements": rows * row_elems}
        if rows > 1 and row_stride != row_elems:
            fields["stride_bytes"] = int(row_stride * isz)
            fields["rows"] = rows
        rng = self._range(p, elem_off, rows, row_elems, row_stride)
        if write:
            return self.op("DMA_STORE_TILE", pe, layer, fields, reads=[("spm", b)],
                           hbm_writes=[rng], frees=frees)
        return self.op("DMA_LOAD_TILE", pe, layer, fields, writes=[("spm", b)],
                       hbm_reads=[rng], frees=frees)

    def const(self, key: str, array: np.ndarray, dtype: str, source: str | None = None,
              shape: tuple[int, ...] | None = None):  # noqa: ANN201
        return self.plan.constant(key, array, dtype, source=source, shape=shape)

    def raw_const(self, tid: str) -> Placement:
        p = self.plan.placements.get(tid)
        if p is not None:
            return p
        arr = np.asarray(self.g.weights[tid])
        dt = self.g.tensors[tid].dtype
        if dt == "int4":
            dt = "int8"
        if dt not in ITEMSIZE:
            dt = {np.dtype(np.float32): "fp32", np.dtype(np.int64): "int64"}.get(arr.dtype,
                                                                                  "fp32")
        p = self.const(tid, arr, dt, source=tid)
        self.plan.placements[tid] = p
        return p

    def placement(self, tid: str) -> Placement:
        t = self.g.tensors[tid]
        if t.const:
            return self.raw_const(tid)
        return self.plan.placements[tid]

    # ------------------------------------------------------------------ dispatch
    def run(self) -> TileGraph:
        for n in self.g.nodes:
            self.phase()
            if self.restart_placement:
                self._rr = 0
            if self._is_view(n):
                continue
            fold = self.state.folded.get(n.id)
            if fold or self._dequant_bypassed(n):
                continue
            handler = getattr(self, f"lower_{n.op_type.lower()}", None)
            done = False
            if handler is not None:
                done = handler(n)
            if not done:
                self.layer_op(n)
        return self.tg

    def _dequant_bypassed(self, n) -> bool:  # noqa: ANN001
        """A DEQUANTIZE whose every consumer is an integer TE layer reading the int8 source
        directly (see _prepare_x) needs no operation of its own."""
        if n.op_type != "DEQUANTIZE":
            return False
        from kernbench.compiler.quantize import _int8_dequant_source

        out = n.outputs[0]
        t = self.g.tensors[out]
        if out in self.g.outputs or t.quant is None or not t.consumers:
            return False
        if _int8_dequant_source(self.g, out) is None:
            return False
        return all(self.g.node(c).op_type in ("GEMM", "QKV_PROJ")
                   and self.g.node(c).inputs[0] == out
                   and self._mode(self.g.node(c)) == "int" for c in t.consumers)

    def _is_view(self, n) -> bool:  # noqa: ANN001
        if n.op_type not in ("RESHAPE", "TRANSPOSE", "IDENTITY"):
            return False
        src = self.plan.placements.get(n.inputs[0])
        out = self.plan.placements.get(n.outputs[0])
        return src is not None and out is not None and src.key == out.key

    # ------------------------------------------------------------------ fallback
    def layer_op(self, n) -> None:  # noqa: ANN001
        """Run a whole layer on one PE (VE_LAYER_OP / TE_LAYER_OP)."""
        pe = self.next_pe()
        reads, in_bytes, first = [], 0, None
        for tid in n.inputs:
            if not tid:
                continue
            p = self.placement(tid)
            nb = int(math.ceil(int(np.prod(p.shape)) * ITEMSIZE[p.dtype])) if p.shape else 8
            if n.attributes.get("gather_rows") and tid == n.inputs[1]:
                # a row gather reads the rows it gathers, not the table
                ids = int(np.prod(self.g.tensors[n.inputs[0]].shape))
                nb = int(math.ceil(ids * p.shape[-1] * ITEMSIZE[p.dtype]))
            in_bytes += nb
            first = first if first is not None else p
            if not self.g.tensors[tid].const:
                lo = p.addr
                hi = p.addr + int(math.ceil(
                    (sum((d - 1) * s for d, s in zip(p.shape, p.strides, strict=True)) + 1)
                    * ITEMSIZE[p.dtype]))
                reads.append((p.key, lo, hi, hi - lo, hi - lo))
        writes, out_bytes, elements = [], 0, 1
        for tid in n.outputs:
            if not tid:
                continue
            p = self.plan.placements.get(tid)
            if p is None:
                continue
            nb = int(math.ceil(int(np.prod(p.shape)) * ITEMSIZE[p.dtype]))
            out_bytes += nb
            elements = max(elements, int(np.prod(p.shape)))
            writes.append((p.key, p.addr, p.addr + nb, nb, nb))
        fields: dict[str, Any] = {"layer_id": n.id, "in_bytes": in_bytes,
                                  "out_bytes": out_bytes,
                                  "dram_addr": first.addr_in(self.cube(pe)) if first else 0}
        if n.op_type in TE_LAYER_OPS:
            m, nn, k = _te_dims(self.g, n)
            fields.update({"m": m, "n": nn, "k": k})
            opcode = "TE_LAYER_OP"
        else:
            fields["elements"] = elements
            fields["op"] = _cost_op(n, self.topo.config.cube.pe_template.pe_math.op_cycles)
            opcode = "VE_LAYER_OP"
        self.op(opcode, pe, n.id, fields, hbm_reads=reads, hbm_writes=writes)

    # ------------------------------------------------------------------ GEMM
    def _mode(self, n) -> str | None:  # noqa: ANN001
        """How a TE layer is tiled: "int" (A8 with W8 / W4), "fp16", "fp32"; None: the
        layer runs whole as a layer op (e.g. A4 or W2, which the tiles do not pack)."""
        qa, qw = n.qbits_activation, n.qbits_weight
        if qa == 8 and qw in (8, 4, None):
            return "int"
        if qa == "fp16" and qw in ("fp16", None):
            return "fp16"
        if qa is None and qw is None:
            return "fp32"
        return None

    def _weight(self, n, w_tid: str, mode: str):  # noqa: ANN001
        """(placement of the stored weight, per-column scale [N] or None, wbits), computed
        once per (weight, mode, bits): checking a layer and lowering it both ask."""
        key = (w_tid, mode, n.qbits_weight)
        if key not in self._weights:
            self._weights[key] = self._weight_once(n, w_tid, mode)
        return self._weights[key]

    def _weight_once(self, n, w_tid: str, mode: str):  # noqa: ANN001, ANN202
        t = self.g.tensors[w_tid]
        w = np.asarray(self.g.weights[w_tid])
        if w.ndim != 2:
            return None
        if mode == "int":
            if t.quant is not None:
                q = t.quant
                zp = self.g.weights.get(q.zero_point) if q.zero_point else None
                if q.block_size or (zp is not None and np.any(np.asarray(zp) != 0)):
                    return None
                if q.axis is not None and q.axis % 2 != 1:
                    return None
                bits = int(q.dtype.lstrip("uint"))
                if q.dtype.startswith("u") or bits not in (4, 8):
                    return None
                wq, sw = w.astype(np.int8), np.asarray(self.g.weights[q.scale], np.float32)
            else:
                bits = n.qbits_weight if isinstance(n.qbits_weight, int) else 8
                if bits not in (4, 8):
                    return None
                if is_shape_only_array(w):  # shape-only model: stored bits, no values
                    dt = "int4" if bits == 4 else "int8"
                    p = self.const(f"{w_tid}@int{bits}", None, dt, source=w_tid,
                                   shape=tuple(w.shape))
                    return p, np.ones((w.shape[1],), np.float32), bits
                wq, sw = qmath.quantize_weight(w.astype(np.float32), bits,
                                               -1 if self._per_channel else None)
                sw = np.asarray(sw, np.float32)
            dt = "int4" if bits == 4 else "int8"
            data = qmath.pack_int4(wq) if bits == 4 else wq.astype(np.int8)
            p = self.const(f"{w_tid}@int{bits}", np.asarray(data), dt, source=w_tid,
                           shape=tuple(w.shape))
            return p, sw, bits
        if is_shape_only_array(w):
            dt = "fp16" if mode == "fp16" else "fp32"
            return (self.const(f"{w_tid}@{dt}", None, dt, source=w_tid, shape=tuple(w.shape)),
                    None, 16 if mode == "fp16" else 32)
        if mode == "fp16":
            arr = qmath.round_to_float(w.astype(np.float32), "fp16").astype(np.float16)
            return self.const(f"{w_tid}@fp16", arr, "fp16", source=w_tid), None, 16
        return self.const(f"{w_tid}@fp32", w.astype(np.float32), "fp32", source=w_tid), None, 32

    def _prepare_x(self, n, x_tid: str, mode: str, bits: int):  # noqa: ANN001
        """The activation as the TE reads it: quantized / cast into an HBM scratch, once per
        (tensor, format) however many layers read it."""
        key = (x_tid, mode, bits)
        if key not in self._prepared:
            self._prepared[key] = self._prepare_x_once(n, x_tid, mode, bits)
        return self._prepared[key]

    def _prepare_x_once(self, n, x_tid: str, mode: str, bits: int):  # noqa: ANN001
        from kernbench.compiler.quantize import _int8_dequant_source

        if mode == "int":
            dq = _int8_dequant_source(self.g, x_tid)
            if dq is not None and self.g.tensors[x_tid].quant is not None:
                src = self.placement(dq[0])
                if src.contiguous:  # int8 data already in HBM: the TE reads it directly
                    k = src.shape[-1]
                    m = int(np.prod(src.shape[:-1]))
                    sx = np.asarray(self.g.weights[dq[1]], np.float32).reshape(())
                    return Placement(src.key, src.addr, (m, k), (k, 1), "int8",
                                     src.replicas), sx
        xp = self.placement(x_tid)
        if not xp.contiguous:
            return None
        k = xp.shape[-1]
        m = int(np.prod(xp.shape[:-1]))
        if mode == "fp16" and xp.dtype == "fp16":  # already fp16 in HBM
            return Placement(xp.key, xp.addr, (m, k), (k, 1), "fp16", xp.replicas), None
        if xp.dtype != "fp32":
            return None
        if mode == "fp32":
            return Placement(xp.key, xp.addr, (m, k), (k, 1), "fp32", xp.replicas), None
        t = self.g.tensors[x_tid]
        if mode == "int":
            if t.quant is None:
                return None
            sx = np.asarray(self.g.weights[t.quant.scale], np.float32).reshape(())
            zp = (np.asarray(self.g.weights[t.quant.zero_point]).reshape(())
                  if t.quant.zero_point else np.zeros((), np.int8))
            if int(zp) != 0 or t.quant.dtype.startswith("u"):
                return None
            out_dt = "int8"
        else:
            sx, out_dt = None, "fp16"
        key = f"{x_tid}@{out_dt}"
        a = self.plan.allocate(key, (m, k), out_dt, "scratch", source=x_tid)
        out = Placement(a.key, a.addrs[0], (m, k), (k, 1), out_dt)
        rows = max(1, min(m, self.bank // (k * 4), math.ceil(m / self.n_pes)))
        for r0 in range(0, m, rows):
            r = min(rows, m - r0)
            pe = self.next_pe()
            bi = self.buf(pe, r * k * 4, f"{n.id}.x32")
            bo = self.buf(pe, r * k * ITEMSIZE[out_dt], f"{n.id}.xq")
            self.dma(False, pe, bi, xp, r0 * k, 1, r * k, r * k, n.id)
            if mode == "int":
                self.op("VE_QUANTIZE_TILE", pe, n.id,
                        {"length": k, "rows": r, "qbits_activation": 32, "out_qbits": bits,
                         "scale": float(sx), "zero_point": 0},
                        reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
            else:
                self.op("VE_COPY_TILE", pe, n.id, {"length": k, "rows": r,
                                                   "qbits_activation": 32, "out_qbits": 16},
                        reads=[("in", bi)], writes=[("out", bo)], frees=[bi])
            self.dma(True, pe, bo, out, r0 * k, 1, r * k, r * k, n.id, frees=[bo])
        self.phase()
        return out, sx

    def _gemm(self, n, xq: Placement, sx, w_tid: str, b_tid: str | None, out_tid: str,
              mode: str) -> bool:  # noqa: ANN001
        wres = self._weight(n, w_tid, mode)
        if wres is None:
            return False
        wp, sw, wbits = wres
        k, nn = wp.shape
        m = xq.shape[0]
        op = self.plan.placements[out_tid]
        if not op.contiguous or op.dtype not in ("fp32", "fp16") \
                or int(np.prod(op.shape)) != m * nn:
            return False
        # epilogue constants: scale vector (sx·sw) and bias, fp32 [N]
        if mode == "int":
            sw_b = sw.reshape(()) if sw.ndim == 0 or sw.size == 1 else sw.reshape(-1)
            scale = (np.asarray(sx, np.float32) * sw_b).astype(np.float32)
            scale = np.broadcast_to(scale, (nn,)).astype(np.float32)
        else:
            scale = np.ones((nn,), np.float32)
        sp = self.const(f"{n.id}:{out_tid}@scale", scale, "fp32")
        bp = None
        if b_tid:
            bias = np.asarray(self.g.weights[b_tid], np.float32).reshape(-1)
            bp = self.const(f"{b_tid}@fp32", bias, "fp32", source=b_tid)
        ab = ITEMSIZE[xq.dtype]
        wb = ITEMSIZE[wp.dtype]
        qa_bits = {"int8": 8, "fp16": 16, "fp32": 32}[xq.dtype]
        g = self.gemm_spec
        t = choose_gemm_tiles(m, nn, k, a_bytes=ab, w_bytes=wb, bank_bytes=self.bank,
                              tcm_bytes=self.tcm_bytes, rows=g.rows, cols=g.cols,
                              dataflow=g.dataflow, n_pes=self.n_pes)
        # output tiles round-robin over PEs; on each PE two tiles' K loops interleave, so
        # one tile's fetch, store and command round trip hide behind the other's compute
        per_pe: dict[int, list[tuple[int, int, int, int]]] = {}
        for m0 in range(0, m, t.tm):
            for n0 in range(0, nn, t.tn):
                per_pe.setdefault(self.next_pe(), []).append(
                    (m0, n0, min(t.tm, m - m0), min(t.tn, nn - n0)))
        ksteps = list(range(0, k, t.tk))
        width = 2 if len(ksteps) > 1 else 1
        for pe in sorted(per_pe):
            tiles = per_pe[pe]
            for g0 in range(0, len(tiles), width):
                group = tiles[g0:g0 + width]
                accs = [self.buf(pe, tm * tn * 4, f"{n.id}.acc") for _, _, tm, tn in group]
                for i, k0 in enumerate(ksteps):
                    tk = min(t.tk, k - k0)
                    for (m0, n0, tm, tn), c in zip(group, accs, strict=True):
                        ba = self.buf(pe, tm * tk * ab, f"{n.id}.a")
                        bw = self.buf(pe, tk * tn * wb, f"{n.id}.w")
                        self.dma(False, pe, ba, xq, m0 * k + k0, tm, tk, k, n.id)
                        self.dma(False, pe, bw, wp, k0 * nn + n0, tk, tn, nn, n.id,
                                 role="weight")
                        self.op("TE_GEMM_TILE", pe, n.id,
                                {"m": tm, "n": tn, "k": tk, "qbits_weight": wbits,
                                 "qbits_activation": qa_bits, "ofm_qbits": 32,
                                 "accumulate": i > 0},
                                reads=[("ifm", ba), ("wgt", bw)] + ([("ofm", c)] if i else []),
                                writes=[("ofm", c)], frees=[ba, bw])
                for (m0, n0, tm, tn), c in zip(group, accs, strict=True):
                    self._epilogue(n, pe, c, sp, bp, op, m0, n0, tm, tn, nn, mode)
        return True
        return True

    def _epilogue(self, n, pe: int, c: Buf, sp: Placement, bp: Placement | None,  # noqa: ANN001
                  op: Placement, m0: int, n0: int, tm: int, tn: int, nn: int,
                  mode: str) -> None:
        """Scale (and bias) the accumulator tile into fp32 and store it."""
        bs = self.buf(pe, tn * 4, f"{n.id}.scale")
        self.dma(False, pe, bs, sp, n0, 1, tn, tn, n.id, role="weight")
        reads = [("in", c), ("scale", bs)]
        frees = [c, bs]
        if bp is not None:
            bb = self.buf(pe, tn * 4, f"{n.id}.bias")
            self.dma(False, pe, bb, bp, n0, 1, tn, tn, n.id, role="weight")
            reads.append(("bias", bb))
            frees.append(bb)
        # in place: the result overwrites the accumulator it is computed from
        self.op("VE_DEQUANTIZE_TILE", pe, n.id,
                {"length": tn, "rows": tm, "qbits_activation": 32,
                 "out_qbits": QBITS_OF[op.dtype],
                 "in_dtype": "int32" if mode == "int" else "float32"},
                reads=reads, writes=[("out", c)], frees=frees[1:])
        self.dma(True, pe, c, op, m0 * nn + n0, tm, tn, nn, n.id, frees=[c])

    def _te_inputs(self, n, weights: list[str]):  # noqa: ANN001, ANN202
        """(mode, prepared activation, its scale) when the layer can be tiled, else None."""
        mode = self._mode(n)
        if mode is None or not all(self.g.tensors[t].const for t in weights):
            return None
        if any(self._weight(n, w, mode) is None for w in weights):
            return None
        bits = n.qbits_activation if mode == "int" else 16
        prep = self._prepare_x(n, n.inputs[0], mode, bits)
        return None if prep is None else (mode, *prep)

    def lower_gemm(self, n) -> bool:  # noqa: ANN001
        te = self._te_inputs(n, [n.inputs[1]])
        if te is None:
            return False
        mode, xq, sx = te
        b = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else None
        return self._gemm(n, xq, sx, n.inputs[1], b, n.outputs[0], mode)

    def lower_qkv_proj(self, n) -> bool:  # noqa: ANN001
        te = self._te_inputs(n, n.inputs[1:4])
        if te is None:
            return False
        mode, xq, sx = te
        for j in range(3):
            b = n.inputs[4 + j] if len(n.inputs) > 4 + j and n.inputs[4 + j] else None
            if not self._gemm(n, xq, sx, n.inputs[1 + j], b, n.outputs[j], mode):
                raise ValueError(f"{n.id}: projection {j} cannot be tiled")
        return True

    # ------------------------------------------------------------------ row-wise VE ops
    def _rows(self, p: Placement) -> tuple[int, int]:
        cols = p.shape[-1] if p.shape else 1
        return int(np.prod(p.shape[:-1])) if len(p.shape) > 1 else 1, cols

    def _row_op(self, n) -> bool:  # noqa: ANN001
        opcode = ROW_OPS[n.op_type]
        x = self.placement(n.inputs[0])
        out_tid = n.outputs[0]
        y = self.plan.placements.get(out_tid)
        if y is None or x.dtype not in ("fp32", "fp16") or y.dtype not in ("fp32", "fp16") \
                or not x.contiguous or not y.contiguous or x.shape != y.shape \
                or self.g.tensors[n.inputs[0]].const:
            return False
        rows, cols = self._rows(x)
        xs, ys = ITEMSIZE[x.dtype], ITEMSIZE[y.dtype]
        fields: dict[str, Any] = {"length": cols, "qbits_activation": QBITS_OF[x.dtype],
                                  "out_qbits": QBITS_OF[y.dtype]}
        extra: list[tuple[str, Placement, bool]] = []  # (role, placement, per-row?)
        if n.op_type in ("LAYER_NORM", "RMS_NORM"):
            if n.attributes.get("axis", -1) % len(x.shape) != len(x.shape) - 1:
                return False
            fields["eps"] = float(n.attributes["eps"])
            names = ("gamma", "beta") if n.op_type == "LAYER_NORM" else ("gamma",)
            for role, tid in zip(names, n.inputs[1:], strict=False):
                if not tid:
                    continue
                if not self.g.tensors[tid].const or self.g.tensors[tid].shape != [cols]:
                    return False
                extra.append((role, self.raw_const(tid), False))
            if extra:
                fields["param_qbits"] = 32
        elif n.op_type == "SOFTMAX":
            if n.attributes.get("axis", -1) % len(x.shape) != len(x.shape) - 1:
                return False
        elif n.op_type == "GELU":
            fields["approximate"] = n.attributes.get("approximate", "none")
        elif n.op_type in ("ADD", "MUL"):
            b = self.placement(n.inputs[1])
            if b.dtype not in ("fp32", "fp16") or not b.contiguous:
                return False
            fields["in2_qbits"] = QBITS_OF[b.dtype]
            if tuple(b.shape) == tuple(x.shape):
                extra.append(("in2", b, True))
            elif int(np.prod(b.shape)) == cols and (not b.shape or b.shape[-1] == cols):
                extra.append(("in2", b, False))
                fields["in2_rows"] = 1
            else:
                return False
        per = max(1, min(rows, self.bank // (cols * 4), math.ceil(rows / self.n_pes)))
        for r0 in range(0, rows, per):
            r = min(per, rows - r0)
            pe = self.next_pe()
            bi = self.buf(pe, r * cols * xs, f"{n.id}.in")
            self.dma(False, pe, bi, x, r0 * cols, 1, r * cols, r * cols, n.id)
            reads = [("in", bi)]
            frees = [bi]
            for role, p, per_row in extra:
                cnt = r * cols if per_row else cols
                be = self.buf(pe, cnt * ITEMSIZE[p.dtype], f"{n.id}.{role}")
                self.dma(False, pe, be, p, r0 * cols if per_row else 0, 1, cnt, cnt, n.id,
                         role="activation" if per_row else "weight")
                reads.append((role, be))
                frees.append(be)
            bo = self.buf(pe, r * cols * ys, f"{n.id}.out")
            self.op(opcode, pe, n.id, dict(fields, rows=r), reads=reads, writes=[("out", bo)],
                    frees=frees)
            self.dma(True, pe, bo, y, r0 * cols, 1, r * cols, r * cols, n.id, frees=[bo])
        return True

    lower_layer_norm = _row_op
    lower_rms_norm = _row_op
    lower_softmax = _row_op
    lower_gelu = _row_op
    lower_silu = _row_op
    lower_add = _row_op
    lower_mul = _row_op

    # ------------------------------------------------------------------ KV_UPDATE
    def lower_kv_update(self, n) -> bool:  # noqa: ANN001
        """present[b, h] = concat(past[b, h], new[b, h]) along the sequence; a cache stored
        at KV bits is quantized on the way (VE_QUANTIZE with its calibrated scale)."""
        past = self.placement(n.inputs[0])
        new = self.placement(n.inputs[1])
        out = self.plan.placements[n.outputs[0]]
        t_out = self.g.tensors[n.outputs[0]]
        if t_out.quant is not None and out.dtype == "fp32":
            return False  # fake-quantized at other than 8 bits: the layer runs whole
        quant = out.dtype != past.dtype
        if n.attributes.get("axis", 2) != 2 or len(out.shape) != 4 or not out.contiguous \
                or not past.contiguous or new.strides[3] != 1:
            return False
        if quant and (past.dtype != "fp32" or out.dtype not in ("int8", "fp16")):
            return False  # e.g. a 4-bit cache: the layer runs whole
        scale = self.plan.scales.get(out.key)
        b_, h_, p_len, d = past.shape
        s_len = new.shape[2]
        isz = max(ITEMSIZE[past.dtype], ITEMSIZE[new.dtype])
        for b in range(b_):
            for h in range(h_):
                # in place (a paged / ring cache): only the new rows are written
                srcs = ((new, s_len, p_len),) if n.attributes.get("in_place") else (
                    (past, p_len, 0), (new, s_len, p_len))
                for src, rows, dst_row in srcs:
                    per = max(1, min(rows, self.bank // (d * isz)))
                    for r0 in range(0, rows, per):
                        r = min(per, rows - r0)
                        pe = self.next_pe()
                        bb = self.buf(pe, r * d * isz, f"{n.id}.rows")
                        off = b * src.strides[0] + h * src.strides[1] + r0 * src.strides[2]
                        self.dma(False, pe, bb, src, off, r, d, src.strides[2], n.id, role="kv")
                        if src.dtype != out.dtype and out.dtype == "fp16":
                            bq = self.buf(pe, r * d * 2, f"{n.id}.rows16")
                            self.op("VE_COPY_TILE", pe, n.id,
                                    {"length": d, "rows": r, "qbits_activation": 32,
                                     "out_qbits": 16},
                                    reads=[("in", bb)], writes=[("out", bq)], frees=[bb])
                            bb = bq
                        elif src.dtype != out.dtype:
                            bq = self.buf(pe, r * d, f"{n.id}.rowsq")
                            self.op("VE_QUANTIZE_TILE", pe, n.id,
                                    {"length": d, "rows": r, "qbits_activation": 32,
                                     "out_qbits": 8, "scale": scale, "zero_point": 0},
                                    reads=[("in", bb)], writes=[("out", bq)], frees=[bb])
                            bb = bq
                        o = b * out.strides[0] + h * out.strides[1] + (dst_row + r0) * d
                        self.dma(True, pe, bb, out, o, r, d, d, n.id, role="kv", frees=[bb])
        return True

    # ------------------------------------------------------------------ ATTENTION
    def lower_attention(self, n) -> bool:  # noqa: ANN001
        a = n.attributes
        if not tiled_attention(self.g, n):
            return False
        q, k, v = (self.placement(t) for t in n.inputs[:3])
        out = self.plan.placements[n.outputs[0]]
        if q.dtype != "fp32" or out.dtype != "fp32" or any(
                p.strides[3] != 1 for p in (q, k, v, out)) or any(
                p.dtype not in ("fp32", "int8") for p in (k, v)):
            raise ValueError(f"{n.id}: attention shapes do not fit the TCM tiling")
        scales = []
        for tid in n.inputs[:3]:
            t = self.g.tensors[tid]
            if t.quant is None or t.quant.zero_point:
                raise ValueError(f"{n.id}: attention shapes do not fit the TCM tiling")
            scales.append(np.asarray(self.g.weights[t.quant.scale], np.float32).reshape(()))
        sq, sk, sv = scales
        mask = None
        if len(n.inputs) > 3 and n.inputs[3]:
            mt = self.g.tensors[n.inputs[3]]
            if mt.dtype == "bool":  # constant: as the additive bias the interpreter builds
                m = np.asarray(self.g.weights[n.inputs[3]], bool)
                bias = np.where(m, np.float32(0), np.float32(-np.inf)).astype(np.float32)
                mask = self.const(f"{n.inputs[3]}@bias", bias, "fp32", source=n.inputs[3])
            else:
                mask = self.placement(n.inputs[3])
            if mask.strides[3] != 1:
                raise ValueError(f"{n.id}: mask must be contiguous in its last axis")
        bsz, hq, s_len, d = q.shape
        hkv, t_len, dv = k.shape[1], k.shape[2], v.shape[3]
        if mask is not None and mask.shape[-1] < t_len:
            raise ValueError(f"{n.id}: attention shapes do not fit the TCM tiling")
        rep = hq // hkv
        score_scale = float(np.float32(sq) * np.float32(sk) * np.float32(a["scale"]))
        sv_f = float(np.float32(sv))
        bits_a, bits_kv = n.qbits_activation, n.qbits_kv
        s_blk = max(1, min(s_len, self.bank // (t_len * 4)))
        kv_isz = 1 if k.dtype == "int8" and v.dtype == "int8" else 4  # staged at fp32?
        if t_len * d * kv_isz > self.bank or t_len * dv * kv_isz > self.bank:
            raise ValueError(f"{n.id}: attention shapes do not fit the TCM tiling")
        for b in range(bsz):
            for g in range(hkv):
                pe = self.next_pe()
                kv = []
                for src, dim, sc, tag in ((k, d, sk, "k"), (v, dv, sv, "v")):
                    off = b * src.strides[0] + g * src.strides[1]
                    if src.dtype == "int8":  # a cache already stored at KV bits
                        bq = self.buf(pe, t_len * dim, f"{n.id}.{tag}q")
                        self.dma(False, pe, bq, src, off, t_len, dim, src.strides[2], n.id,
                                 role="kv")
                        kv.append(bq)
                        continue
                    b32 = self.buf(pe, t_len * dim * 4, f"{n.id}.{tag}32")
                    self.dma(False, pe, b32, src, off, t_len, dim, src.strides[2], n.id, role="kv")
                    bq = self.buf(pe, t_len * dim, f"{n.id}.{tag}q")
                    self.op("VE_QUANTIZE_TILE", pe, n.id,
                            {"length": dim, "rows": t_len, "qbits_activation": 32,
                             "out_qbits": bits_kv, "scale": float(sc), "zero_point": 0},
                            reads=[("in", b32)], writes=[("out", bq)], frees=[b32])
                    kv.append(bq)
                kq, vq = kv
                for hh in range(rep):
                    h = g * rep + hh
                    for s0 in range(0, s_len, s_blk):
                        s = min(s_blk, s_len - s0)
                        bq32 = self.buf(pe, s * d * 4, f"{n.id}.q32")
                        off = b * q.strides[0] + h * q.strides[1] + s0 * q.strides[2]
                        self.dma(False, pe, bq32, q, off, s, d, q.strides[2], n.id)
                        bqq = self.buf(pe, s * d, f"{n.id}.qq")
                        self.op("VE_QUANTIZE_TILE", pe, n.id,
                                {"length": d, "rows": s, "qbits_activation": 32,
                                 "out_qbits": bits_a, "scale": float(sq), "zero_point": 0},
                                reads=[("in", bq32)], writes=[("out", bqq)], frees=[bq32])
                        acc = self.buf(pe, s * t_len * 4, f"{n.id}.scores")
                        self.op("TE_GEMM_TILE", pe, n.id,
                                {"m": s, "n": t_len, "k": d, "qbits_weight": bits_kv,
                                 "qbits_activation": bits_a, "ofm_qbits": 32,
                                 "transpose_wgt": True},
                                reads=[("ifm", bqq), ("wgt", kq)], writes=[("ofm", acc)],
                                frees=[bqq])
                        sc32 = self.buf(pe, s * t_len * 4, f"{n.id}.s32")
                        self.op("VE_DEQUANTIZE_TILE", pe, n.id,
                                {"length": t_len, "rows": s, "qbits_activation": 32,
                                 "out_qbits": 32, "scale": score_scale, "in_dtype": "int32"},
                                reads=[("in", acc)], writes=[("out", sc32)], frees=[acc])
                        sm_fields: dict[str, Any] = {"length": t_len, "rows": s,
                                                     "qbits_activation": 32, "out_qbits": 32}
                        reads = [("in", sc32)]
                        frees = [sc32]
                        if mask is not None:
                            bm = self.buf(pe, s * t_len * 4, f"{n.id}.mask")
                            mb = b % mask.shape[0]
                            mh = h % mask.shape[1]
                            moff = (mb * mask.strides[0] + mh * mask.strides[1]
                                    + s0 * mask.strides[2])
                            self.dma(False, pe, bm, mask, moff, s, t_len, mask.strides[2], n.id)
                            reads.append(("bias", bm))
                            frees.append(bm)
                        if a.get("causal"):
                            sm_fields["causal_offset"] = int(a.get("causal_offset", 0)) + s0
                        prob = self.buf(pe, s * t_len * 4, f"{n.id}.p")
                        self.op("VE_SOFTMAX_TILE", pe, n.id, sm_fields, reads=reads,
                                writes=[("out", prob)], frees=frees)
                        # P is quantized with a per-row scale (row max / 127)
                        rsc = self.buf(pe, s * 4, f"{n.id}.prow")
                        self.op("VE_ROWSCALE_TILE", pe, n.id,
                                {"length": t_len, "rows": s, "qbits_activation": 32,
                                 "bits": bits_a},
                                reads=[("in", prob)], writes=[("out", rsc)])
                        pq = self.buf(pe, s * t_len, f"{n.id}.pq")
                        self.op("VE_QUANTIZE_TILE", pe, n.id,
                                {"length": t_len, "rows": s, "qbits_activation": 32,
                                 "out_qbits": bits_a, "scale": 1.0, "zero_point": 0},
                                reads=[("in", prob), ("row_scale", rsc)], writes=[("out", pq)],
                                frees=[prob])
                        oacc = self.buf(pe, s * dv * 4, f"{n.id}.oacc")
                        last = hh == rep - 1 and s0 + s >= s_len
                        self.op("TE_GEMM_TILE", pe, n.id,
                                {"m": s, "n": dv, "k": t_len, "qbits_weight": bits_kv,
                                 "qbits_activation": bits_a, "ofm_qbits": 32},
                                reads=[("ifm", pq), ("wgt", vq)], writes=[("ofm", oacc)],
                                frees=[pq] + ([kq, vq] if last else []))
                        o32 = self.buf(pe, s * dv * 4, f"{n.id}.o32")
                        self.op("VE_DEQUANTIZE_TILE", pe, n.id,
                                {"length": dv, "rows": s, "qbits_activation": 32,
                                 "out_qbits": 32, "scale": sv_f, "in_dtype": "int32"},
                                reads=[("in", oacc), ("row_scale", rsc)],
                                writes=[("out", o32)], frees=[oacc, rsc])
                        ooff = b * out.strides[0] + h * out.strides[1] + s0 * out.strides[2]
                        self.dma(True, pe, o32, out, ooff, s, dv, out.strides[2], n.id,
                                 frees=[o32])
        return True


_COST_OP = {"ROPE": "rope", "TRANSPOSE": "transpose", "LAYER_NORM": "layernorm",
            "RMS_NORM": "rmsnorm", "SOFTMAX": "softmax", "GELU": "gelu", "SILU": "silu",
            "ADD": "add", "MUL": "mul", "QUANTIZE": "quantize", "DEQUANTIZE": "dequantize",
            "QDQ": "quantize", "DYNAMIC_QUANTIZE": "quantize", "REDUCE": "sum"}


def _cost_op(n, table: dict) -> str:  # noqa: ANN001
    """The pe_math cost-table entry that prices a whole layer run on the vector engine."""
    op = _COST_OP.get(n.op_type)
    if op is None and n.op_type == "ELEMENTWISE":
        op = {"reciprocal": "div", "pow": "exp"}.get(n.attributes.get("op"),
                                                     n.attributes.get("op"))
    return op if op in table else "copy"


def _te_dims(g, n) -> tuple[int, int, int]:  # noqa: ANN001
    """(m, n, k) of a TE layer run whole, for its timing."""
    ins = [g.tensors[t] for t in n.inputs if t]
    out = g.tensors[n.outputs[0]]
    osz = int(np.prod(out.shape)) if out.shape else 1
    if n.op_type == "CONV":
        w = ins[1].shape
        k = int(np.prod(w[1:]))
        return max(1, osz // w[0]), w[0], k
    if n.op_type == "ATTENTION":
        q, kk = ins[0].shape, ins[1].shape
        return int(np.prod(q[:-1])), kk[-2], q[-1]
    if n.op_type == "QLINEAR_MATMUL":
        a, b = ins[0].shape, ins[3].shape
    else:
        a, b = ins[0].shape, ins[1].shape
    k = a[-1] if a else 1
    nn = b[-1] if b else 1
    return max(1, osz // max(nn, 1)), nn, k


@dataclass(frozen=True)
class Tile:
    name: str = "tiling"

    def apply(self, state: CompileState) -> CompileState:
        state.tiles = Lowerer(state).run()
        return state
