"""What the conv and pool lowerings share: a layer's 2-D window geometry (1-D layers are
2-D with height 1), the input rows an output row block needs (its halo, and the padding
the block keeps), and the choice of block sizes.

A block of output rows [oh0, oh0 + toh) reads input rows [oh0·sh − pt, (oh0 + toh − 1)·sh
− pt + (kh − 1)·dh + 1) clipped to the input; what falls outside becomes the block's own
top / bottom padding (the last block keeps the layer's bottom padding, so a ceil-mode
pool's overhang is handled as the layer's is). Every block spans the full width with the
layer's left / right padding, so its DMAs are whole channel rows (2-D strided over
channels).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kernbench.ir.model import LayerIR
from kernbench.ir.ops import node_attrs


@dataclass(frozen=True)
class Geom:
    """A window layer on NCHW data: input (n, c, h, w), window, output (ho, wo)."""

    n: int
    c: int
    h: int
    w: int
    kh: int
    kw: int
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    dils: tuple[int, int]
    ho: int
    wo: int

    def rows_for(self, oh0: int, toh: int) -> RowBlock:
        """The input rows and the block padding of output rows [oh0, oh0 + toh)."""
        sh, dh = self.strides[0], self.dils[0]
        pt, pb = self.pads[0], self.pads[2]
        start = oh0 * sh - pt
        end = (oh0 + toh - 1) * sh - pt + (self.kh - 1) * dh + 1
        r0, r1 = max(start, 0), min(end, self.h)
        last = oh0 + toh >= self.ho
        return RowBlock(r0, r1 - r0, r0 - start, pb if last else max(0, end - self.h))

    def window_fields(self, rb: RowBlock) -> dict[str, Any]:
        """The Window2D fields of a block (CMDQ)."""
        return {"h": rb.rows, "w": self.w, "kh": self.kh, "kw": self.kw,
                "stride": self.strides[0], "stride_w": self.strides[1],
                "dilation": self.dils[0], "dilation_w": self.dils[1],
                "pad_top": rb.pad_top, "pad_left": self.pads[1],
                "pad_bottom": rb.pad_bottom, "pad_right": self.pads[3]}


class RowBlock(NamedTuple):
    """Input rows [first, first + rows) and the block's top / bottom zero padding."""

    first: int
    rows: int
    pad_top: int
    pad_bottom: int


def geom(n: LayerIR, x_shape: list[int] | tuple[int, ...], y_shape: list[int] | tuple[int, ...],
         kernel: list[int]) -> Geom | None:
    """The 2-D geometry of a 1-D or 2-D window layer (None for other ranks)."""
    a = node_attrs(n)
    nsp = len(x_shape) - 2
    if nsp not in (1, 2) or len(y_shape) != len(x_shape) or len(kernel) != nsp:
        return None
    strides = list(a.strides or [1] * nsp)
    pads = list(a.pads or [0] * (2 * nsp))
    dils = list(a.dilations or [1] * nsp)
    if nsp == 1:  # (L) → (1, L)
        strides, dils, kernel = [1, strides[0]], [1, dils[0]], [1, kernel[0]]
        pads = [0, pads[0], 0, pads[1]]
        x_shape = [x_shape[0], x_shape[1], 1, x_shape[2]]
        y_shape = [y_shape[0], y_shape[1], 1, y_shape[2]]
    return Geom(int(x_shape[0]), int(x_shape[1]), int(x_shape[2]), int(x_shape[3]),
                int(kernel[0]), int(kernel[1]), (int(strides[0]), int(strides[1])),
                (int(pads[0]), int(pads[1]), int(pads[2]), int(pads[3])),
                (int(dils[0]), int(dils[1])), int(y_shape[2]), int(y_shape[3]))


def halves(total: int) -> list[int]:
    """Block sizes to try: total, ceil(total/2), ceil(total/4), ..., 1."""
    out, v = [], total
    while True:
        out.append(v)
        if v == 1:
            return sorted(set(out), reverse=True)
        v = math.ceil(v / 2)


#: cycles charged per tile for what does not run in parallel: the command processor issues
#: every entry of every tile in order (about eight entries per tile, a cycle or so each),
#: so spreading a tiny layer over 64 PEs is not free (on the zoo CNNs 5–10 beat 0 and 40)
ISSUE_CYCLES_PER_TILE = 8
#: the smallest block of an element-wise tile worth its DMA round trips (elements)
MIN_BLOCK_ELEMS = 4096


def choose(cands: Iterable[tuple[int, ...]], fits: Callable[..., bool],
           cost: Callable[..., float], tiles: Callable[..., int], n_pes: int) -> tuple[int, ...]:
    """The candidate that fits and minimises (waves × cost of a tile + tiles × issue cost,
    tiles): the busiest PE's time and the issue time first, then fewer, larger tiles."""
    best = None
    for c in cands:
        if not fits(*c):
            continue
        t = tiles(*c)
        score = (math.ceil(t / n_pes) * cost(*c) + t * ISSUE_CYCLES_PER_TILE, t)
        if best is None or score < best[0]:
            best = (score, c)
    if best is None:
        raise ValueError("no block of this window layer fits a TCM bank")
    return best[1]
