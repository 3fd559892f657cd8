"""Vector-engine window and CNN opcodes: depthwise convolution, pooling, row
reductions and clamps.

VE_DWCONV_TILE and VE_POOL_TILE work on ``rows`` images of ``c`` channel planes (NCHW,
packed back to back) with the window fields of `Window2D`; they cost one lane operation
per window tap per output element (pe_math ``mul`` for the depthwise multiply-accumulate,
``max`` or ``add`` for pooling), so their cycles grow with the window size:
``pipeline_latency + ceil(outputs × kh × kw / lanes) × op_cycles[op]``.
VE_REDUCE_TILE reduces each of ``rows`` vectors of ``length`` to one value; VE_CLIP_TILE
clamps element-wise (ReLU, ReLU6, Clip).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from kernbench.cmdq.data import dtype_of
from kernbench.cmdq.opcodes.base import (
    DEFAULT_OFM_QBITS,
    DataEnv,
    Lowering,
    NonNegInt,
    PosInt,
    QBits,
    Rules,
    TcmRange,
    require_math_op,
)
from kernbench.cmdq.opcodes.registry import register_opcode
from kernbench.cmdq.opcodes.ve import MathData, VeTile, VeVectorTile
from kernbench.cmdq.opcodes.window import Window2D
from kernbench.common.pe_commands import MathCmd, PeCommand


class VeWindowTile(VeTile, Window2D):
    """A window op on ``rows`` images of ``c`` planes of h × w; out ``[rows, c_out, h_out,
    w_out]``."""

    signed_fields: ClassVar[frozenset[str]] = frozenset({"pad_value"})
    c: PosInt = Field(description="Input channels (planes per image).")

    @property
    def c_out(self) -> int:
        return self.c

    @property
    def window_ceil(self) -> bool:
        return False

    @property
    def out_elements(self) -> int:
        h_out, w_out = self.out_dims(self.window_ceil)
        return self.rows * self.c_out * max(h_out, 0) * max(w_out, 0)

    @property
    def elements(self) -> int:
        return self.rows * self.c * self.h * self.w

    @property
    def work_elements(self) -> int:
        """Lane operations: one per window tap per output element."""
        return self.out_elements * self.kh * self.kw

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        return []

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        return (
            TcmRange("in", pe, self.in_bank, self.in_offset, self.elements,
                     self.qbits_activation, "r"),
            *self._extra_inputs(pe),
            TcmRange("out", pe, self.out_bank, self.out_offset, self.out_elements,
                     self.out_bits, "w"),
        )

    def rules(self, v: Rules) -> bool:
        super().rules(v)
        return self.window_rules(v, self.window_ceil)

    def command(self, low: Lowering) -> PeCommand:
        """A MathCmd of outputs × taps lane operations of the cost op."""
        rd, wr = self.traffic(low.pe)
        _, w_out = self.out_dims(self.window_ceil)
        rows = max(self.out_elements // max(w_out, 1), 1) * self.kh * self.kw
        params = {"op": self.cost_ops()["opcode"], "length": max(w_out, 1), "rows": rows,
                  "ve_id": self.ve_id, "entry": self.id}
        return MathCmd(label=low.label, params=params, fetch_nbytes=rd, store_nbytes=wr,
                       meta=low.meta)

    def _description(self, env: DataEnv, ins: list[tuple[str, list[int], str]],
                     params: dict[str, Any]) -> dict[str, Any]:
        require_math_op(self, self.math_op)
        h_out, w_out = self.out_dims(self.window_ceil)
        return {"op_kind": "math", "op_name": self.opcode.lower(), "op": self.math_op,
                "space": env.space, "input_addrs": [env.addr(r) for r, _, _ in ins],
                "input_shapes": [s for _, s, _ in ins], "input_dtypes": [d for _, _, d in ins],
                "dst_addr": env.addr("out"),
                "shape_out": [self.rows, self.c_out, h_out, w_out],
                "dtype": dtype_of(self.out_bits, integer=self._integer_out()), **params}

    def _integer_out(self) -> bool:
        return False


@register_opcode
class VeDwconvTile(VeWindowTile):
    """Depthwise convolution on the vector engine: in ``[rows, c, h, w]``, wgt
    ``[c·multiplier, 1, kh, kw]`` (ONNX OIHW, groups = c), out ``[rows, c·multiplier,
    h_out, w_out]`` (+ bias ``[c·multiplier]``). Integer operands accumulate exactly in
    int32 (``out_qbits`` 32); floats in fp32 (16-bit ones in ``f16_format``)."""

    cost_op: ClassVar[str] = "mul"  # one multiply-accumulate per tap and lane
    math_op: ClassVar[str] = "conv"
    opcode: Literal["VE_DWCONV_TILE"] = "VE_DWCONV_TILE"
    multiplier: PosInt = Field(1, description="Output channels per input channel.")
    qbits_weight: QBits = Field(description="Weight bit width.")
    wgt_bank: NonNegInt
    wgt_offset: NonNegInt
    bias_bank: NonNegInt | None = Field(None, description="Optional bias (c·multiplier).")
    bias_offset: NonNegInt | None = None
    bias_qbits: QBits = DEFAULT_OFM_QBITS
    out_qbits: QBits | None = DEFAULT_OFM_QBITS
    in_signed: bool | None = Field(
        None, description="false: the 8-bit input is unsigned (uint8); null: "
        "signed.")

    @property
    def c_out(self) -> int:
        return self.c * self.multiplier

    def _integer(self) -> bool:
        return self.qbits_activation <= 8 and self.qbits_weight <= 8

    def _integer_out(self) -> bool:
        return self._integer()

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        out = [TcmRange("wgt", pe, self.wgt_bank, self.wgt_offset,
                        self.c_out * self.kh * self.kw, self.qbits_weight, "r")]
        if self.bias_bank is not None and self.bias_offset is not None:
            out.append(TcmRange("bias", pe, self.bias_bank, self.bias_offset, self.c_out,
                                self.bias_qbits, "r"))
        return out

    def data(self, env: DataEnv) -> dict[str, Any]:
        """Math op ``conv`` (layout nchw, groups = c) on in, wgt (and bias)."""
        integer = self._integer()
        in_dt = "uint8" if self.in_signed is False and self.qbits_activation == 8 \
            else dtype_of(self.qbits_activation, integer, self.f16_format)
        ins = [("in", [self.rows, self.c, self.h, self.w], in_dt),
               ("wgt", [self.c_out, 1, self.kh, self.kw],
                dtype_of(self.qbits_weight, integer, self.f16_format))]
        if self.bias_bank is not None:
            ins.append(("bias", [self.c_out], dtype_of(self.bias_qbits, integer)))
        return self._description(env, ins, {"layout": "nchw", "groups": self.c,
                                            "has_bias": self.bias_bank is not None,
                                            **self.geometry()})


@register_opcode
class VePoolTile(VeWindowTile):
    """Max or average pooling: in ``[rows, c, h, w]`` → out ``[rows, c, h_out, w_out]``, as
    ONNX MaxPool / AveragePool on the tile (``count_include_pad``, ``ceil_mode``)."""

    cost_op: ClassVar[str] = "max"
    math_op: ClassVar[str] = "pool"
    opcode: Literal["VE_POOL_TILE"] = "VE_POOL_TILE"
    mode: Literal["max", "avg"] = Field(description="max: MaxPool; avg: AveragePool.")
    count_include_pad: bool = Field(False, description="avg: padding counts in the divisor.")
    ceil_mode: bool = Field(False, description="Output size rounds up (ONNX ceil_mode).")

    @property
    def window_ceil(self) -> bool:
        return self.ceil_mode

    def cost_ops(self) -> dict[str, str]:
        return {"opcode": "max" if self.mode == "max" else "add"}

    def data(self, env: DataEnv) -> dict[str, Any]:
        """Math op ``pool`` on in."""
        ins = [("in", [self.rows, self.c, self.h, self.w],
                self.float_dtype(self.qbits_activation))]
        return self._description(env, ins, {
            "mode": self.mode, "kernel_shape": [self.kh, self.kw],
            "count_include_pad": self.count_include_pad, "ceil_mode": self.ceil_mode,
            **self.geometry()})


@register_opcode
class VeReduceTile(VeVectorTile):
    """Reduce each of ``rows`` vectors of ``length`` to one value (mean, sum, max, min):
    out ``[rows, 1]`` (GlobalAveragePool / GlobalMaxPool on NCHW rows)."""

    cost_op: ClassVar[str] = "sum"
    math_op: ClassVar[str] = "reduce_rows"
    opcode: Literal["VE_REDUCE_TILE"] = "VE_REDUCE_TILE"
    op: Literal["mean", "sum", "max", "min"] = Field(description="The reduction.")

    def cost_ops(self) -> dict[str, str]:
        return {"opcode": {"max": "reduce_max", "min": "reduce_min"}.get(self.op, "sum")}

    def command(self, low: Lowering) -> PeCommand:
        cmd = super().command(low)
        cmd.params["op"] = self.cost_ops()["opcode"]
        return cmd

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        return (
            TcmRange("in", pe, self.in_bank, self.in_offset, self.rows * self.length,
                     self.qbits_activation, "r"),
            TcmRange("out", pe, self.out_bank, self.out_offset, self.rows, self.out_bits, "w"),
        )

    def data_params(self, d: MathData) -> None:
        d.params = {"reduce": self.op}
        d.shape_out = [self.rows, 1]


@register_opcode
class VeClipTile(VeVectorTile):
    """Element-wise clamp ``min(max(x, lo), hi)``; a null bound is not applied (ReLU is
    ``lo`` 0, ReLU6 ``lo`` 0 ``hi`` 6)."""

    cost_op: ClassVar[str] = "max"
    math_op: ClassVar[str] = "clip"
    opcode: Literal["VE_CLIP_TILE"] = "VE_CLIP_TILE"
    lo: float | None = Field(None, description="Lower bound (null: none).")
    hi: float | None = Field(None, description="Upper bound (null: none).")

    def data_params(self, d: MathData) -> None:
        d.params = {"lo": self.lo, "hi": self.hi}
