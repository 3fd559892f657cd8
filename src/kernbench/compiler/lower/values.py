"""The value types of the lowering: what one lowering hands another (a stored weight, a
prepared activation, a dynamic quantization's results, where a projection's new KV rows
land). Plain data: this module imports no lowering, so every lowering may import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from kernbench.compiler.hbm import Placement
from kernbench.compiler.tilegraph import Buf
from kernbench.ir.model import LayerIR

#: (storage key, first byte, end of hull, row stride, row bytes)
HbmRange = tuple[str, int, int, int, int]
#: TCM operands of a tile op by role ("in", "out", "ifm", "wgt", "ofm", "scale", ...)
Operands = Sequence[tuple[str, Buf]]


class WeightValues(NamedTuple):
    """A TE weight's values before they are stored: `te_weights.weight_tile` stores them
    once per layout the tiles read (row-major [K, N] or column panels), so no layout that
    no tile reads takes HBM. `data`: [K, N] at `dtype` (int4 unpacked, one value a byte),
    None for a shape-only model."""

    key: str
    data: np.ndarray | None
    dtype: str
    shape: tuple[int, ...]  # [K, N]; a conv weight's OIHW
    source: str | None


class TeWeight(NamedTuple):
    """A TE weight as stored for the tiles: its placement, the per-column (or per-tensor)
    scale of an integer weight (None otherwise) and its bits (a conv weight: OIHW, its scale
    per output channel); `colsum`: the int64 column
    sums of the stored integers (for the activation zero-point correction), None when
    unknown (float or shape-only weights) or `summed_later`: then `column_sums` adds up
    `values` when a GEMM with a zero-point activation asks (most never do). A weight
    given by its `values` has no placement until a tile reads it
    (`te_weights.weight_tile`)."""

    placement: Placement | None
    scale: np.ndarray | None
    bits: int
    colsum: np.ndarray | None = None
    values: WeightValues | None = None
    summed_later: bool = False

    def column_sums(self) -> np.ndarray | None:
        """`colsum`, or with `summed_later` the int64 column sums of `values`' integers."""
        if self.colsum is None and self.summed_later and self.values is not None:
            return self.values.data.sum(axis=0, dtype=np.int64)
        return self.colsum

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape if self.values is not None else self.placement.shape

    @property
    def dtype(self) -> str:
        return self.values.dtype if self.values is not None else self.placement.dtype


class PreparedX(NamedTuple):
    """A TE activation as the tiles read it ((M, K) int8 / fp16 / fp32), its static
    scale (integer mode) or None, and the zero point of the int8 data (an asymmetric
    activation; a uint8 one is stored shifted by -128, so its zero point is z - 128)."""

    placement: Placement
    scale: np.ndarray | None
    zero_point: int = 0



@dataclass(frozen=True)
class DynamicActivation:
    """A tiled DYNAMIC_QUANTIZE's results: the shifted int8 data (M, K), the run-time
    (scale, zero point) pair and each reader's zero-point column term, in HBM scratch."""

    data: Placement
    qparams: Placement
    corr: dict[str, Placement]  # MATMUL_INTEGER id → its zero-point column term (int32 [N])


@dataclass(frozen=True)
class FusedStep:
    """A consumer layer a GEMM's epilogue applies to its accumulator tiles (`epilogue`).
    The residual is named, not placed: a constant one is placed when the GEMM's tiles
    first read it (`epilogue.residual_of`)."""

    layer: LayerIR
    fields: dict[str, Any]            # CMDQ fields of its VE tile (without length / rows)
    out: Placement                    # where the fused tiles are stored
    in2_tid: str | None = None        # ADD: the residual tensor
    in2_per_row: bool = False         # residual has one row per output row (else broadcast)
    #: the GEMM's output and the reshapes' outputs on the way to the consumer
    chain: tuple[str, ...] = ()


class NormAfter(NamedTuple):
    """The LAYER_NORM / RMS_NORM reading a one-row GEMM's fused epilogue step
    (`gemm_rowreduce.planned_norm`): the GEMM's K parts a tile, and whether one PE adds
    the row up and runs the norm (`reduced`: at least two parts, every slot in one TCM
    bank)."""

    norm: str
    parts: int
    reduced: bool


@dataclass(frozen=True)
class IntegerMatmul:
    """A MATMUL_INTEGER the tiles compute: its weight (re-centered int8), the Cast and
    Mul layers its epilogue computes, the scale tensor and the tensor it finally writes."""

    weight: np.ndarray
    cast: LayerIR
    mul: LayerIR
    scale_tid: str
    out_tid: str


@dataclass(frozen=True)
class KvRows:
    """Where a projection's output elements land in the present cache: element e of the
    (contiguous) output is new[b, h, s, j] by `dims` (the view's dimensions, largest
    stride first: (dimension, stride, size)), stored at present[b, h, first_row + s, j]."""

    present: Placement
    first_row: int                       # the past rows before the new ones
    dims: tuple[tuple[int, int, int], ...]
    scale: float | None                  # the cache's scale when it is stored quantized
    unread: tuple[str, ...]              # the float output and its views: not stored
    update: str = ""                     # the KV_UPDATE that then copies only the past


@dataclass(frozen=True)
class QuantStore:
    """A float activation its producer also stores quantized for the integer GEMMs that
    read it (`xquant`): the tensor the GEMMs read (the producer's output, or a reshape
    aliasing it), the bits, the static scale and zero point the GEMMs would quantize
    with, and the float tensor and views nothing else reads (not stored then). The
    scratch is allocated by the producer's tiles, under the key the GEMM's own quantized
    copy of `read_as` would have (`<read_as>@int<bits>`), where the GEMM finds it."""

    read_as: str
    bits: int
    scale: np.ndarray
    zero_point: int
    unread: tuple[str, ...]


@dataclass(frozen=True)
class KvStore:
    """An int8 copy of a projection's output an integer attention reads as its Q, K or V
    (`xquant.kv_quant_out`): the attention's input (`view`, the output seen through
    views) and its shape and strides, the static scale, the cuts of the scratch by cube
    (a one-row query whose heads are attended in several cubes) and the float tensors
    nothing else reads (not stored). The scratch is allocated by the projection's tiles,
    under the key `<output>@kv8`."""

    view: str
    view_shape: tuple[int, ...]
    view_strides: tuple[int, ...]
    scale: float
    cuts: tuple[tuple[int, int], ...]
    unread: tuple[str, ...]
