"""Tensor-engine opcodes: TE_GEMM_TILE (spec §8.1) and TE_CONV_TILE (§8.2, fields 1.1).

Lowering: a GemmCmd on the PE's pe_gemm{te_id}: fetch ifm + wgt (+ bias), the array on
(m, n, k), store ofm. An accumulating tile keeps its partial sums in the array's
accumulators, so its ofm is written back but not fetched again. TE_CONV_TILE runs as its
implicit GEMM per channel group (M = n·h_out·w_out, N = c_out/groups,
K = kh·kw·c_in/groups), the groups one after another.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from kernbench.cmdq.data import dtype_of
from kernbench.cmdq.opcodes.base import (
    DEFAULT_OFM_QBITS,
    F16_FORMAT_DOC,
    DataEnv,
    F16Format,
    Lowering,
    NonNegInt,
    OfmQBits,
    Opcode,
    PosInt,
    QBits,
    Rules,
    TcmRange,
    check_engine_id,
    require_math_op,
    tcm_traffic,
)
from kernbench.cmdq.opcodes.registry import register_opcode
from kernbench.cmdq.opcodes.window import Window2D
from kernbench.common.pe_commands import GemmCmd, PeCommand


class TeTile(Opcode):
    engine: ClassVar[str] = "te"
    since: ClassVar[str] = "1.0"
    timing: ClassVar[str] = "gemm"

    te_id: NonNegInt = Field(0, description="Tensor engine inside the PE (0..te_per_pe-1).")
    ifm_bank: NonNegInt
    ifm_offset: NonNegInt
    wgt_bank: NonNegInt
    wgt_offset: NonNegInt
    ofm_bank: NonNegInt
    ofm_offset: NonNegInt
    qbits_weight: QBits
    qbits_activation: QBits
    ofm_qbits: OfmQBits = Field(
        DEFAULT_OFM_QBITS, description="(1.1) Bit width of the output (accumulator) tile: "
        "32 (int32 or fp32), or 64 (an int64 accumulator, integer operands only; "
        "int16 × int16 needs it). Narrower outputs are refused: requantize the "
        "accumulator with a VE op.")
    accumulate: bool = Field(
        False, description="(1.1) Add the product to the ofm tile instead of overwriting it."
    )
    bias_bank: NonNegInt | None = Field(
        None, description="(1.1) Bank of an optional bias vector (n values, c_out for conv)."
    )
    bias_offset: NonNegInt | None = None
    bias_qbits: QBits = Field(DEFAULT_OFM_QBITS, description="(1.1) Bias bit width.")
    f16_format: F16Format | None = Field(None, description=F16_FORMAT_DOC)
    int16: bool = Field(
        False, description="16-bit operands are int16 (an int16 KV cache), not "
        "fp16: with integer other operands the product accumulates exactly in int32.")
    ifm_signed: bool | None = Field(
        None, description="false: the 8-bit activation is unsigned (uint8 × int8 "
        "→ int32, as QLinearMatMul / QLinearConv with uint8 inputs); null: signed.")

    def ifm_dtype(self) -> str:
        """Element type of the activation operand."""
        if self.ifm_signed is False and self.qbits_activation == 8:
            return "uint8"
        return self.operand_dtype(self.qbits_activation)

    def _operand_elements(self) -> tuple[int, int, int, int]:
        """(ifm, wgt, ofm, bias) element counts."""
        raise NotImplementedError

    def gemm_dims(self) -> tuple[int, int, int]:
        """(m, n, k) of the array's work."""
        raise NotImplementedError

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        ifm, wgt, ofm, bias = self._operand_elements()
        ranges = [
            TcmRange("ifm", pe, self.ifm_bank, self.ifm_offset, ifm, self.qbits_activation, "r"),
            TcmRange("wgt", pe, self.wgt_bank, self.wgt_offset, wgt, self.qbits_weight, "r"),
        ]
        if self.bias_bank is not None and self.bias_offset is not None:
            ranges.append(
                TcmRange("bias", pe, self.bias_bank, self.bias_offset, bias, self.bias_qbits, "r")
            )
        ranges.append(
            TcmRange("ofm", pe, self.ofm_bank, self.ofm_offset, ofm, self.ofm_qbits,
                     "rw" if self.accumulate else "w")
        )
        return tuple(ranges)

    @property
    def work_elements(self) -> int:
        return self._operand_elements()[2]

    def rules(self, v: Rules) -> bool:
        """The engine exists; the ofm holds the accumulator the data pass writes: 32 bits,
        or 64 for integer operands, which int16 × int16 needs."""
        check_engine_id(v, "te_id", self.te_id, v.limits.te_per_pe)
        integer = self.accumulator_dtype() != "float32"
        both16 = self.int16 and self.qbits_activation == 16 and self.qbits_weight == 16
        if self.ofm_qbits < 32:
            v.add("ofm_qbits", f"{self.ofm_qbits}-bit output: a TE tile writes its "
                  f"{'int32' if integer else 'fp32'} accumulator (ofm_qbits 32"
                  f"{' or 64' if integer else ''}); requantize it with a VE op")
            return False
        if self.ofm_qbits == 64 and not integer:
            v.add("ofm_qbits", "64-bit output needs integer operands (an int64 accumulator; "
                  "a float accumulator is fp32, ofm_qbits 32)")
            return False
        if both16 and self.ofm_qbits != 64:
            v.add("ofm_qbits", "int16 × int16 products overflow an int32 accumulator: "
                  "ofm_qbits must be 64")
            return False
        return True

    def traffic(self, pe: int) -> tuple[int, int]:
        # an accumulating GEMM keeps its partial sums in the array's accumulators: the ofm
        # is written back, not fetched again
        return tcm_traffic(self.tcm_ranges(pe), not_fetched="ofm")

    def unit(self, pe_id: str) -> str | None:
        return f"{pe_id}.pe_gemm" + (str(self.te_id) if self.te_id else "")

    def command(self, low: Lowering) -> PeCommand:
        m, n, k = self.gemm_dims()
        rd, wr = self.traffic(low.pe)
        params = {"m": m, "n": n, "k": k, "qbits_weight": self.qbits_weight,
                  "qbits_activation": self.qbits_activation, "te_id": self.te_id,
                  "entry": self.id}
        return GemmCmd(label=low.label, params=params, fetch_nbytes=rd, store_nbytes=wr,
                       meta=low.meta)

    def operand_dtype(self, bits: int) -> str:
        """An operand's element type: 16 bits is fp16 unless `int16`."""
        return "int16" if bits == 16 and self.int16 else dtype_of(bits, False, self.f16_format)

    def accumulator_dtype(self) -> str:
        """When both operands are integers (<= 8 bits, or int16): int64 at ofm_qbits 64,
        else int32; otherwise float32."""
        integer = all(b <= 8 or b == 16 and self.int16
                      for b in (self.qbits_activation, self.qbits_weight))
        if not integer:
            return "float32"
        return "int64" if self.ofm_qbits == 64 else "int32"


@register_opcode
class TeGemmTile(TeTile):
    """ofm[m, n] (+)= ifm[m, k] @ wgt[k, n] (+ bias[n]); row-major, packed (spec §8.1).
    With ``transpose_wgt`` (1.1) the weight tile is stored [n, k] and used transposed."""

    opcode: Literal["TE_GEMM_TILE"] = "TE_GEMM_TILE"
    m: PosInt
    n: PosInt
    k: PosInt
    transpose_wgt: bool = Field(
        False, description="(1.1) wgt is stored [n, k] (e.g. K of attention) and used as its "
        "transpose."
    )

    def _operand_elements(self) -> tuple[int, int, int, int]:
        return self.m * self.k, self.k * self.n, self.m * self.n, self.n

    def gemm_dims(self) -> tuple[int, int, int]:
        return self.m, self.n, self.k

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k

    def data(self, env: DataEnv) -> dict[str, Any]:
        """``gemm`` on TCM operands: int8/int4 × int8 → int32 exact, float → fp32; the
        optional bias (``n`` values at bias_qbits, int32 for an integer GEMM, e.g. the
        zero-point column correction) is added to every row of the product."""
        addr = env.addr
        qw = self.qbits_weight
        tw = bool(self.transpose_wgt)
        acc = self.accumulator_dtype()
        d = {
            "op_kind": "gemm", "op_name": "te_gemm", "space": env.space,
            "src_a_addr": addr("ifm"), "src_b_addr": addr("wgt"), "dst_addr": addr("ofm"),
            "shape_a": [self.m, self.k], "shape_b": [self.n, self.k] if tw else [self.k, self.n],
            "shape_out": [self.m, self.n], "dtype_a": self.ifm_dtype(),
            "dtype_b": self.operand_dtype(qw),
            "dtype_acc": acc, "dtype_out": acc, "transpose_a": False, "transpose_b": tw,
            "accumulate": bool(self.accumulate),
        }
        if self.bias_bank is not None:
            d["bias_addr"] = addr("bias")
            d["dtype_bias"] = dtype_of(self.bias_qbits, acc != "float32")
        return d


@register_opcode
class TeConvTile(TeTile, Window2D):
    """2-D convolution tile (spec §8.2, fields defined in 1.1, widened for CNN layers).

    ``layout`` "nhwc" (1.1): ifm ``[n, h, w, c_in]``, wgt ``[kh, kw, c_in/groups, c_out]``,
    ofm ``[n, h_out, w_out, c_out]``. ``layout`` "nchw": ifm ``[n, c_in, h, w]``,
    wgt ``[c_out, c_in/groups, kh, kw]`` (ONNX OIHW), ofm ``[n, c_out, h_out, w_out]``.
    Window fields (strides, dilations, per-side padding) are `Window2D`'s; padding is
    implicit zeros, not stored. ``groups`` splits channels as ONNX Conv does; the array
    runs the groups one after another.
    """

    math_op: ClassVar[str] = "conv"
    signed_fields: ClassVar[frozenset[str]] = frozenset({"pad_value"})
    opcode: Literal["TE_CONV_TILE"] = "TE_CONV_TILE"
    n: PosInt = Field(1, description="Batch.")
    c_in: PosInt
    c_out: PosInt
    groups: PosInt = Field(1, description="Channel groups; divides c_in, c_out.")
    layout: Literal["nhwc", "nchw"] = Field(
        "nhwc", description="Operand layouts (see the opcode's description).")

    def _operand_elements(self) -> tuple[int, int, int, int]:
        h_out, w_out = self.out_hw
        return (
            self.n * self.h * self.w * self.c_in,
            self.kh * self.kw * (self.c_in // self.groups) * self.c_out,
            self.n * max(h_out, 0) * max(w_out, 0) * self.c_out,
            self.c_out,
        )

    def gemm_dims(self) -> tuple[int, int, int]:
        """(m, n, k) of one group's implicit GEMM."""
        h_out, w_out = self.out_hw
        return (self.n * h_out * w_out, self.c_out // self.groups,
                self.kh * self.kw * (self.c_in // self.groups))

    @property
    def macs(self) -> int:
        h_out, w_out = self.out_hw
        return (self.n * max(h_out, 0) * max(w_out, 0) * self.c_out * self.kh * self.kw
                * (self.c_in // self.groups))

    def rules(self, v: Rules) -> bool:
        """The window fits the padded input; groups divide both channel counts."""
        super().rules(v)
        ok = self.window_rules(v)
        if self.c_in % self.groups or self.c_out % self.groups:
            v.add("groups", f"groups {self.groups} must divide c_in {self.c_in} and c_out "
                  f"{self.c_out}")
            ok = False
        return ok

    def command(self, low: Lowering) -> PeCommand:
        """The GEMM command of one group, run ``groups`` times (param ``groups``)."""
        cmd = super().command(low)
        if self.groups > 1:
            cmd.params["groups"] = self.groups
        return cmd

    def data(self, env: DataEnv) -> dict[str, Any]:
        """Math op ``conv`` (the data pass's convolution tile): inputs ifm, wgt, then bias
        ``[c_out]`` (``has_bias``) and, when accumulating, the old ofm (``accumulate``);
        params ``layout``, ``strides``, ``pads`` [t, l, b, r], ``dilations``, ``groups``."""
        require_math_op(self, self.math_op)
        qw = self.qbits_weight
        h_out, w_out = self.out_hw
        acc = self.accumulator_dtype()
        addrs = [env.addr("ifm"), env.addr("wgt")]
        cg = self.c_in // self.groups
        if self.layout == "nchw":
            shapes = [[self.n, self.c_in, self.h, self.w], [self.c_out, cg, self.kh, self.kw]]
            out_shape = [self.n, self.c_out, h_out, w_out]
        else:
            shapes = [[self.n, self.h, self.w, self.c_in], [self.kh, self.kw, cg, self.c_out]]
            out_shape = [self.n, h_out, w_out, self.c_out]
        dtypes = [self.ifm_dtype(), self.operand_dtype(qw)]
        if self.bias_bank is not None:
            addrs.append(env.addr("bias"))
            shapes.append([self.c_out])
            dtypes.append(dtype_of(self.bias_qbits, acc != "float32"))
        if self.accumulate:
            addrs.append(env.addr("ofm"))
            shapes.append(out_shape)
            dtypes.append(acc)
        return {"op_kind": "math", "op_name": "te_conv_tile", "op": self.math_op, "space": env.space,
                "input_addrs": addrs, "input_shapes": shapes, "input_dtypes": dtypes,
                "dst_addr": env.addr("ofm"), "shape_out": out_shape, "dtype": acc,
                "stride": self.stride, "padding": self.padding, "layout": self.layout,
                "groups": self.groups, **self.geometry(),
                "has_bias": self.bias_bank is not None, "accumulate": bool(self.accumulate)}
