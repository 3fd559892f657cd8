"""What every tile of one attention layer reads: the placements, scales and blocking one
`attention.plan_attention` decides. Its own module so that the attention lowerings
(attention, attention_kv, attention_parts) import it and never each other's plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.xquant import QuantOut, store_tile
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR, QBits
from kernbench.numerics.flash import longest_part


@dataclass(frozen=True)
class AttentionTiles:
    """What every tile of one attention layer needs."""

    q: Placement
    k: Placement
    v: Placement
    out: Placement
    mask: Placement | None
    scales: tuple[np.ndarray, np.ndarray, np.ndarray]  # s_q, s_k, s_v (0-d float32)
    score_scale: float             # s_q · s_k · softmax scale
    bits_a: QBits
    bits_kv: QBits
    causal: bool
    causal_offset: int
    s_blk: int                     # query rows per block
    softcap: float = 0.0           # c·tanh(s / c) on the scores (0: none), in VE_SOFTMAX
    kv_block: int = 0              # keys per KV block (0: the whole K / V at once)
    kv_parts: int = 1              # key ranges on PEs of their own, combined
    kv_first: int = 0              # keys of the owner's range (0: equal)
    q_out: QuantOut | None = None  # the output projection's int8 input, stored here too

    def store(self, lw: Lowering, n: LayerIR, pe: int, ob: Buf, b: int, h: int, s0: int,
              s: int, frees: list[Buf], heads: int = 1) -> None:
        """Output rows [s0, s0 + s) of head h from `ob` (out's dtype) into the output,
        and quantized into the consuming GEMM's int8 scratch first when it reads them
        (`xquant`: the same values its own preparation would make). With `heads` > 1
        (s == 1): `ob` holds row s0 of heads h .. h + heads - 1, one row each."""
        out, dv = self.out, self.v.shape[3]
        ooff = b * out.strides[0] + h * out.strides[1] + s0 * out.strides[2]
        rows, stride = (heads, out.strides[1]) if heads > 1 else (s, out.strides[2])
        store_tile(lw, self.q_out, pe, ob, out, n.id, ooff, rows, dv, stride,
                   lw.engines.ve(pe), frees)

    def packed_heads(self, bank: int) -> int:
        """The query heads of one KV group that run as one block, a row per head: all
        of them (`rep` ≥ 2) when each has a single query row (a decode step under
        grouped-query attention), as a decode kernel packs them: one Q·Kᵀ and one P·V of
        `rep` rows against the group's shared K and V instead of `rep` one-row products.
        Else 1. Only when the rows' causal offsets make no difference (a tile's row i sees
        keys up to causal_offset + i: every key when row 0 already does) and the `rep`
        rows' scores fit a TCM `bank` for the most keys a tile holds at once (a KV block,
        else the longest key range): one decision for the layer, so that every key range
        and the owner's combine agree on the rows and the scratch layout."""
        rep = self.q.shape[1] // self.k.shape[1]
        if rep < 2 or self.q.shape[2] != 1:
            return 1
        if self.causal and self.causal_offset < self.t_len - 1:
            return 1
        keys = self.kv_block or longest_part(self.t_len, self.kv_parts, self.kv_first)
        return rep if rep * keys * (8 if self.wide else 4) <= bank else 1

    @property
    def t_len(self) -> int:
        return self.k.shape[2]

    @property
    def wide(self) -> bool:
        """16-bit integer activations (A16): Q and P are int16 and both TE products
        accumulate in int64, read back as int64 by the VE."""
        return self.bits_a == 16

    def te_fields(self) -> dict[str, object]:
        """The TE tiles' accumulator fields: int64 (ofm_qbits 64, int16 operands) at A16,
        int32 otherwise (an int16 cache's K / V through `attention_kv.kv_te`)."""
        return {"int16": True, "ofm_qbits": 64} if self.wide else {"ofm_qbits": 32}

    @property
    def acc_dtype(self) -> str:
        return "int64" if self.wide else "int32"
