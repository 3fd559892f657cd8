"""Vector-engine quantization opcodes (1.1): quantize, requantize, dequantize (the GEMM
epilogue) and the per-row scale that feeds them. Lowering and the data description are
`ve.VeTile`'s; each class adds its inputs and op parameters."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from kernbench.cmdq.data import dtype_of
from kernbench.cmdq.opcodes.base import NonNegInt, QBits, Rules, TcmRange
from kernbench.cmdq.opcodes.registry import register_opcode
from kernbench.cmdq.opcodes.ve import MathData, VeVectorTile
from kernbench.numerics.dtypes import dtype


class VeQuantTile(VeVectorTile):
    signed_fields: ClassVar[frozenset[str]] = frozenset({"zero_point"})
    math_op: ClassVar[str] = "quantize"

    out_qbits: QBits = Field(description="Output bit width (required).")  # type: ignore[assignment]
    row_scale_bank: NonNegInt | None = Field(
        None, description="(1.1) Per-row scales (rows fp32 values) that replace `scale`."
    )
    row_scale_offset: NonNegInt | None = None
    qparams_bank: NonNegInt | None = Field(
        None, description="Run-time (scale, zero point), two fp32 values (e.g. "
        "VE_QPARAMS_TILE's output): they replace `scale`; the zero point adds to "
        "`zero_point`.")
    qparams_offset: NonNegInt | None = None

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        out = []
        if self.row_scale_bank is not None and self.row_scale_offset is not None:
            out.append(TcmRange("row_scale", pe, self.row_scale_bank, self.row_scale_offset,
                                self.rows, 32, "r"))
        if self.qparams_bank is not None and self.qparams_offset is not None:
            out.append(TcmRange("qparams", pe, self.qparams_bank, self.qparams_offset, 2, 32,
                                "r"))
        return out
    scale: float = Field(
        gt=0, description="out = saturate(round_half_even(in / scale) + zero_point) (ONNX)."
    )
    zero_point: int = Field(0, description="Output zero point (may be negative).")
    out_signed: bool | None = Field(
        None, description="false: unsigned output (uint8, ONNX's asymmetric "
        "activations); null: signed.")

    def data_params(self, d: MathData) -> None:
        """Integer output; per-row scales switch to ``cmdq_quantize_rows``, run-time
        qparams to ``cmdq_quantize_qparams``."""
        unsigned = self.out_signed is False and self.out_bits == 8
        # a quantized value is an integer: 16 bits is int16 here, never fp16
        d.dtype = "uint8" if unsigned else "int16" if self.out_bits == 16 \
            else dtype_of(self.out_bits)
        d.params = {"scale": self.scale, "zero_point": self.zero_point, "bits": self.out_bits,
                    "signed": not unsigned}
        if self.row_scale_bank is not None:
            d.add("row_scale", [self.rows, 1])
            d.op = "cmdq_quantize_rows"
        elif self.qparams_bank is not None:
            d.add("qparams", [2])
            d.op = "cmdq_quantize_qparams"


@register_opcode
class VeQuantizeTile(VeQuantTile):
    """(1.1) Quantize a (wider, usually float) input to out_qbits integers."""

    cost_op: ClassVar[str] = "quantize"
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_QUANTIZE_TILE"] = "VE_QUANTIZE_TILE"


@register_opcode
class VeRequantizeTile(VeQuantTile):
    """(1.1) Rescale integers (e.g. int32 accumulators) to out_qbits integers with the
    QUANTIZE formula (divide by ``scale``). With a multiplier vector, one fp32
    value per column (``multiplier_bank``) or per row (``row_multiplier_bank``), the int32
    input is multiplied instead: out = saturate(round_half_even(float32(in) · m) +
    zero_point), the QLinearMatMul / QLinearConv epilogue with m = s_x·s_w/s_y computed
    offline (``scale`` is then unused)."""

    cost_op: ClassVar[str] = "requantize"
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_REQUANTIZE_TILE"] = "VE_REQUANTIZE_TILE"
    multiplier_bank: NonNegInt | None = Field(
        None, description="Per-column multipliers (length fp32) replacing `scale`.")
    multiplier_offset: NonNegInt | None = None
    row_multiplier_bank: NonNegInt | None = Field(
        None, description="Per-row multipliers (rows fp32) replacing `scale`: a "
        "conv tile's rows are output channels.")
    row_multiplier_offset: NonNegInt | None = None

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        out = super()._extra_inputs(pe)
        if self.multiplier_bank is not None and self.multiplier_offset is not None:
            out.append(TcmRange("multiplier", pe, self.multiplier_bank,
                                self.multiplier_offset, self.length, 32, "r"))
        if self.row_multiplier_bank is not None and self.row_multiplier_offset is not None:
            out.append(TcmRange("row_multiplier", pe, self.row_multiplier_bank,
                                self.row_multiplier_offset, self.rows, 32, "r"))
        return out

    def rules(self, v: Rules) -> bool:
        """At most one multiplier source besides the scalar; no row scales."""
        super().rules(v)
        many = [self.multiplier_bank, self.row_multiplier_bank, self.row_scale_bank]
        if sum(b is not None for b in many) > 1:
            v.add("multiplier_bank", "give one of multiplier_bank, row_multiplier_bank, "
                  "row_scale_bank")
        return True

    def data_params(self, d: MathData) -> None:
        """``requantize`` (int32 input × the multiplier input) with a multiplier vector;
        otherwise QUANTIZE's description."""
        super().data_params(d)
        if self.multiplier_bank is None and self.row_multiplier_bank is None:
            return
        d.op = "requantize"
        d.params.pop("scale", None)
        if self.qbits_activation == 32 and not getattr(self, "in_dtype", None):
            d.dtypes[0] = "int32"  # an int32 accumulator (an fp32 one names its in_dtype)
        if self.multiplier_bank is not None:
            d.add("multiplier", [self.length])
        else:
            d.add("row_multiplier", [self.rows, 1])


@register_opcode
class VeDequantizeTile(VeVectorTile):
    """(1.1) out[r, c] = float(in[r, c]) * scale[c] (+ bias[c]) (+ row_bias[r]): the GEMM
    and conv epilogue.

    The scale is either a vector of ``length`` fp32 values in TCM (``scale_bank``) or the
    scalar field ``scale``; the optional bias is ``length`` fp32 values (``bias_bank``)."""

    cost_op: ClassVar[str] = "dequantize"
    math_op: ClassVar[str] = "cmdq_dequantize"
    signed_fields: ClassVar[frozenset[str]] = frozenset({"zero_point"})
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_DEQUANTIZE_TILE"] = "VE_DEQUANTIZE_TILE"
    scale: float | None = Field(None, description="Scalar scale when no scale vector is given.")
    scale_bank: NonNegInt | None = None
    scale_offset: NonNegInt | None = None
    bias_bank: NonNegInt | None = None
    bias_offset: NonNegInt | None = None
    row_scale_bank: NonNegInt | None = Field(
        None, description="Per-row scales (rows fp32): out = in * (row_scale[r] * scale).")
    row_scale_offset: NonNegInt | None = None
    zero_point: int = Field(
        0, description="(1.1) With the scalar scale: out = float(in - zero_point) * scale "
        "(ONNX DequantizeLinear; the integer difference is exact).")
    row_bias_bank: NonNegInt | None = Field(
        None, description="Per-row bias (rows fp32) added last: a conv tile's "
        "rows are output channels.")
    row_bias_offset: NonNegInt | None = None
    scale_in_bank: NonNegInt | None = Field(
        None, description="One fp32 value in TCM, a scale known only at run "
        "time: out = float(in) * scale_in (+ bias).")
    scale_in_offset: NonNegInt | None = None
    in_dtype: str | None = Field(
        None, description="(1.1) Element type of the input (a numerics dtype name): int32 "
        "(the default at 32 bits: an integer TE accumulator), float32 (a float one), int8 / "
        "uint8 (QLinear operands), or int64 (the int64 accumulator of a 16-bit "
        "integer GEMM, 64 bits per element whatever qbits_activation says).")

    @field_validator("in_dtype")
    @classmethod
    def _known_dtype(cls, v: str | None) -> str | None:
        if v is not None:
            dtype(v)  # ValueError: unknown dtype
        return v

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        """VeTile's ranges; an int64 input is 64 bits an element."""
        ranges = super().tcm_ranges(pe)
        if self.in_dtype != "int64":
            return ranges
        return tuple(r._replace(qbits=64) if r.role == "in" else r for r in ranges)

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        out = []
        if self.scale_in_bank is not None and self.scale_in_offset is not None:
            out.append(TcmRange("scale_in", pe, self.scale_in_bank, self.scale_in_offset, 1,
                                32, "r"))
        if self.row_scale_bank is not None and self.row_scale_offset is not None:
            out.append(TcmRange("row_scale", pe, self.row_scale_bank, self.row_scale_offset,
                                self.rows, 32, "r"))
        if self.row_bias_bank is not None and self.row_bias_offset is not None:
            out.append(TcmRange("row_bias", pe, self.row_bias_bank, self.row_bias_offset,
                                self.rows, 32, "r"))
        if self.scale_bank is not None and self.scale_offset is not None:
            out.append(TcmRange("scale", pe, self.scale_bank, self.scale_offset, self.length,
                                32, "r"))
        if self.bias_bank is not None and self.bias_offset is not None:
            out.append(TcmRange("bias", pe, self.bias_bank, self.bias_offset, self.length,
                                32, "r"))
        return out

    def rules(self, v: Rules) -> bool:
        """A scale is given: the scalar ``scale`` (also the factor of row scales) or a
        scale vector."""
        super().rules(v)
        if self.scale_in_bank is not None:
            if self.scale is not None or self.scale_bank is not None \
                    or self.row_scale_bank is not None or self.zero_point:
                v.add("scale_in_bank", "a run-time scale replaces 'scale', scale_bank, "
                      "row_scale_bank and zero_point (give none of them)")
            return True
        if self.scale is None and (self.scale_bank is None or self.row_scale_bank is not None):
            v.add("scale", "needs a scale: the scalar field 'scale' (with or without "
                  "row_scale_bank) or a scale vector (scale_bank, scale_offset)")
        if self.zero_point and (self.scale is None or self.scale_bank is not None
                                or self.row_scale_bank is not None
                                or self.bias_bank is not None):
            v.add("zero_point", "a zero point needs the scalar scale, without row scales, "
                  "a scale vector or a bias")
        return True

    def data_params(self, d: MathData) -> None:
        """Row scales (× ``scale``), a scale vector, or the scalar; then the bias. A zero
        point (scalar scale, no bias) is the data pass's ``dequantize``."""
        rows, length = self.rows, self.length
        if self.zero_point and self.row_scale_bank is None and self.scale_bank is None \
                and self.bias_bank is None:
            d.op = "dequantize"
            d.params = {"scale": self.scale, "zero_point": self.zero_point}
            return
        if self.scale_in_bank is not None:
            d.add("scale_in", [1])
            d.params["tcm_scale"] = True
        elif self.row_scale_bank is not None:
            d.add("row_scale", [rows, 1])
            d.params["row_scale"] = True
            d.params["scale"] = self.scale
        elif self.scale_bank is not None:
            d.add("scale", [length])
            d.params["vector_scale"] = True
        else:
            d.params["scale"] = self.scale
        if self.bias_bank is not None:
            d.add("bias", [length])
            d.params["has_bias"] = True
        if self.row_bias_bank is not None:
            d.add("row_bias", [rows, 1])
            d.params["has_row_bias"] = True


@register_opcode
class VeRowScaleTile(VeVectorTile):
    """(1.1) out[r] = max_c |in[r, c]| / (2^(bits-1) - 1) as fp32 (1 for an all-zero row):
    the per-row scale a following VE_QUANTIZE_TILE / VE_DEQUANTIZE_TILE uses."""

    cost_op: ClassVar[str] = "reduce_max"
    math_op: ClassVar[str] = "cmdq_row_scale"
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_ROWSCALE_TILE"] = "VE_ROWSCALE_TILE"
    bits: QBits = Field(8, description="Bit width the scale quantizes to.")
    out_qbits: QBits | None = 32

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        return (
            TcmRange("in", pe, self.in_bank, self.in_offset, self.rows * self.length,
                     self.qbits_activation, "r"),
            TcmRange("out", pe, self.out_bank, self.out_offset, self.rows, 32, "w"),
        )

    def data_params(self, d: MathData) -> None:
        d.params = {"bits": self.bits}
        d.dtype = "float32"
        d.shape_out = [self.rows, 1]


@register_opcode
class VeQParamsTile(VeVectorTile):
    """DynamicQuantizeLinear's parameters from partial extremes: ``in`` holds
    ``length`` partial minima, ``in2`` ``length`` partial maxima (fp32); out = (scale,
    zero point) as two fp32 values, for the range [min(mins, 0), max(maxs, 0)] mapped onto
    uint8 (ONNX: scale = (hi − lo) / 255, zero point = saturate(round(−lo / scale)))."""

    cost_op: ClassVar[str] = "reduce_max"
    math_op: ClassVar[str] = "cmdq_dynamic_qparams"
    opcode: Literal["VE_QPARAMS_TILE"] = "VE_QPARAMS_TILE"
    in2_bank: NonNegInt = Field(description="The partial maxima's bank.")
    in2_offset: NonNegInt
    out_qbits: QBits | None = 32

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        n = self.rows * self.length
        return (
            TcmRange("in", pe, self.in_bank, self.in_offset, n, self.qbits_activation, "r"),
            TcmRange("in2", pe, self.in2_bank, self.in2_offset, n, self.qbits_activation, "r"),
            TcmRange("out", pe, self.out_bank, self.out_offset, 2, 32, "w"),
        )

    def data_params(self, d: MathData) -> None:
        d.add("in2", [self.rows, self.length])
        d.dtype = "float32"
        d.shape_out = [2]


@register_opcode
class VeZpCorrTile(VeVectorTile):
    """The zero-point column term of an integer GEMM whose activation zero point
    is known only at run time: out[c] = −(zp + zero_point) · in[c], int32, where in is the
    weight's int32 column sums and zp the second value of ``qparams`` (fp32 pair: scale,
    zero point). A TE_GEMM_TILE adds it as its bias (exact, as the static zero-point term)."""

    cost_op: ClassVar[str] = "mul"
    math_op: ClassVar[str] = "cmdq_zp_correction"
    signed_fields: ClassVar[frozenset[str]] = frozenset({"zero_point"})
    opcode: Literal["VE_ZPCORR_TILE"] = "VE_ZPCORR_TILE"
    qparams_bank: NonNegInt = Field(description="The (scale, zero point) pair's bank.")
    qparams_offset: NonNegInt
    zero_point: int = Field(0, description="Added to the run-time zero point (e.g. −128 "
                            "for uint8 data the TE reads as int8).")
    qbits_activation: QBits = 32
    out_qbits: QBits | None = 32

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        return [TcmRange("qparams", pe, self.qparams_bank, self.qparams_offset, 2, 32, "r")]

    def data_params(self, d: MathData) -> None:
        d.dtypes[0] = "int32"
        d.add("qparams", [2])
        d.dtype = "int32"
        d.params = {"zero_point": self.zero_point}
