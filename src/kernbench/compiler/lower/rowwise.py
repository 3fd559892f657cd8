"""Row-wise vector ops on the last axis: LAYER_NORM, RMS_NORM, SOFTMAX, GELU, SILU, ADD, MUL.

The (rows × cols) input is cut into row blocks spread over PEs (at most one fp32 block per
TCM bank, at least one block per PE when there are enough rows, one per vector engine of
each PE when the work pays for it: `engines.EngineCursor.ve_blocks`; a PE's blocks take
its vector engines in turn). Per block: DMA the rows
in, DMA the per-column parameters (gamma, beta, a broadcast second operand) or the
matching rows of a full second operand, one VE_*_TILE, DMA the rows out (and, when
integer GEMMs read the output, the rows quantized for them: `xquant`). A layer whose
tensors are not contiguous fp32 / fp16 / bf16 of one shape (or whose axis is not the last)
returns False and runs as a layer op.
"""

from __future__ import annotations

from kernbench.compiler.hbm import ITEMSIZE
from kernbench.compiler.lower.blocks import rows_cols
from kernbench.compiler.lower.context import (
    Lowering,
)
from kernbench.compiler.lower.row_spec import RowSpec, row_op_spans, row_spec
from kernbench.compiler.lower.xquant import drop_unwritten, quant_out, store_tile
from kernbench.ir.model import LayerIR


def _blocks(lw: Lowering, n: LayerIR, spec: RowSpec,
            period: int) -> list[tuple[int, int, int]]:
    """Row blocks of the layer (`row_op_spans`, each on the next PE); with a periodic
    operand none crosses a period (its rows of the operand are then contiguous)."""
    blocks = lw.spans_on_pes(row_op_spans(lw, n, spec))
    if not period:
        return blocks
    out = []
    for r0, r, pe in blocks:
        while r:
            take = min(r, period - r0 % period)
            out.append((r0, take, pe))
            r0, r = r0 + take, r - take
    return out


def lower_row_op(lw: Lowering, n: LayerIR) -> bool:
    spec = row_spec(lw, n)
    if spec is None:
        return False
    opcode, x, y, fields, extra = spec
    rows, cols = rows_cols(x)
    xs, ys = ITEMSIZE[x.dtype], ITEMSIZE[y.dtype]
    q = quant_out(lw, n.outputs[0])
    period = next((e[2] for e in extra if 0 < e[2] < rows), 0)
    for r0, r, pe in _blocks(lw, n, spec, period):
        bi = lw.buf(pe, r * cols * xs, f"{n.id}.in")
        lw.dma(False, pe, bi, x, r0 * cols, 1, r * cols, r * cols, n.id)
        reads = [("in", bi)]
        frees = [bi]
        for role, p, rep in extra:
            cnt = r * cols if rep else cols
            be = lw.buf(pe, cnt * ITEMSIZE[p.dtype], f"{n.id}.{role}")
            lw.dma(False, pe, be, p, (r0 % rep) * cols if rep else 0, 1, cnt, cnt, n.id,
                   role="activation" if rep else "weight")
            reads.append((role, be))
            frees.append(be)
        bo = lw.buf(pe, r * cols * ys, f"{n.id}.out")
        ve = lw.engines.ve(pe)
        lw.op(opcode, pe, n.id, dict(fields, rows=r, **ve), reads=reads,
              writes=[("out", bo)],
              frees=frees)
        # with the consuming GEMMs' int8 activation first (their chain)
        store_tile(lw, q, pe, bo, y, n.id, r0 * cols, 1, r * cols, r * cols, ve, [bo])
    drop_unwritten(lw, q)
    return True
