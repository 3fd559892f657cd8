"""Typed element-wise vector opcodes (1.1): VE_ELEMENTWISE_TILE and
VE_CUMSUM_TILE.

The other VE opcodes name their element types by bit width (``qbits``), which cannot tell
bool from int8 or hold int64. These two carry element-type names (``fp32``, ``fp16``,
``bf16``, ``int64``, ``int32``, ``int16``, ``int8``, ``uint8``, ``bool``), so the mask and
position-id arithmetic of language models (cast, and / or / not, compares, where, integer
add / sub / mul, cumulative sums) runs as tiles with its exact ONNX semantics.

VE_ELEMENTWISE_TILE: ``op`` on up to three inputs, each of its own shape that broadcasts
(numpy rules, equal rank) to ``out_shape``. VE_CUMSUM_TILE: cumulative sum along each of
``rows`` vectors of ``length`` (ONNX CumSum on the last axis: ``exclusive``, ``reverse``).
Lowering: a MathCmd on pe_math{ve_id} over the output's elements priced by the pe_math
entry ``cost``. Data: math ops ``ew`` / ``cumsum_rows`` (the IR interpreter's numerics).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from kernbench.cmdq.opcodes.base import (
    DataEnv,
    Lowering,
    NonNegInt,
    OnVectorEngine,
    PosInt,
    Rules,
    TcmRange,
    require_math_op,
)
from kernbench.cmdq.opcodes.registry import register_opcode
from kernbench.common.pe_commands import MathCmd, PeCommand
from kernbench.numerics.dtypes import bits as dtype_bits
from kernbench.numerics.elementwise import BINARY_FNS, UNARY_FNS
from kernbench.numerics.unary_extra import EXTRA_FNS

ElemType = Literal["fp32", "fp16", "bf16", "int64", "int32", "int16", "int8", "uint8", "bool"]
Shape = Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1, max_length=8)]

#: inputs each op takes: (fewest, most)
ARITY: dict[str, tuple[int, int]] = {
    **{op: (1, 1) for op in UNARY_FNS}, **{op: (1, 1) for op in EXTRA_FNS},
    **{op: (2, 2) for op in BINARY_FNS}, "where": (3, 3), "max": (2, 3), "min": (2, 3),
    "cast": (1, 1)}
#: input roles in order
ROLES = ("in", "in2", "in3")


class VeTypedTile(OnVectorEngine):
    """A vector-engine tile whose operands carry element-type names."""

    cost: str = Field("copy", description="pe_math cost-table entry that prices each "
                                          "output element.")
    in_bank: NonNegInt
    in_offset: NonNegInt
    out_bank: NonNegInt
    out_offset: NonNegInt
    out_dtype: ElemType = Field(description="Output element type.")

    @property
    def out_elements(self) -> int:
        raise NotImplementedError

    @property
    def work_elements(self) -> int:
        return self.out_elements

    def cost_ops(self) -> dict[str, str]:
        return {"cost": self.cost}

    def command(self, low: Lowering) -> PeCommand:
        """Fetch the inputs, ``cost`` on every output element, store the output."""
        rd, wr = self.traffic(low.pe)
        params = {"op": self.cost, "length": self.out_elements, "rows": 1,
                  "ve_id": self.ve_id, "entry": self.id}
        return MathCmd(label=low.label, params=params, fetch_nbytes=rd, store_nbytes=wr,
                       meta=low.meta)

    def _describe(self, env: DataEnv, ins: list[tuple[str, list[int], str]],
                  shape_out: list[int], params: dict[str, Any]) -> dict[str, Any]:
        require_math_op(self, self.math_op or "")
        return {"op_kind": "math", "op_name": self.opcode.lower(), "op": self.math_op,
                "space": env.space, "input_addrs": [env.addr(r) for r, _, _ in ins],
                "input_shapes": [s for _, s, _ in ins], "input_dtypes": [d for _, _, d in ins],
                "dst_addr": env.addr("out"), "shape_out": shape_out, "dtype": self.out_dtype,
                **params}


@register_opcode
class VeElementwiseTile(VeTypedTile):
    """(1.1) ``out = op(in, [in2, [in3]])`` with numpy broadcasting: every input has the
    rank of ``out_shape`` and each of its dims equals the output's or is 1."""

    cost_op: ClassVar[str] = "copy"  # the default of `cost`
    math_op: ClassVar[str] = "ew"
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_ELEMENTWISE_TILE"] = "VE_ELEMENTWISE_TILE"
    op: str = Field(description="The element-wise op (the IR's ELEMENTWISE names: cast, "
                                "where, and, or, not, equal, less, add, sub, mul, div, ...).")
    to: ElemType | None = Field(None, description="cast: the target element type.")
    attrs: dict[str, float | int | str] | None = Field(
        None, description="The op's ONNX attributes (alpha, beta, ...), if it has any.")
    out_shape: Shape = Field(description="Output tile shape.")
    in_shape: Shape
    in_dtype: ElemType
    in2_bank: NonNegInt | None = None
    in2_offset: NonNegInt | None = None
    in2_shape: Shape | None = None
    in2_dtype: ElemType | None = None
    in3_bank: NonNegInt | None = None
    in3_offset: NonNegInt | None = None
    in3_shape: Shape | None = None
    in3_dtype: ElemType | None = None

    @property
    def out_elements(self) -> int:
        return int(np.prod(self.out_shape))

    def inputs(self) -> list[tuple[str, list[int], str]]:
        """(role, shape, dtype) of each given input, in order."""
        out = []
        for role in ROLES:
            bank, shape = getattr(self, f"{role}_bank"), getattr(self, f"{role}_shape")
            if bank is None or shape is None:
                break
            out.append((role, list(shape), getattr(self, f"{role}_dtype") or self.in_dtype))
        return out

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        ins = [TcmRange(r, pe, getattr(self, f"{r}_bank"), getattr(self, f"{r}_offset"),
                        int(np.prod(s)), dtype_bits(d), "r") for r, s, d in self.inputs()]
        return (*ins, TcmRange("out", pe, self.out_bank, self.out_offset, self.out_elements,
                               dtype_bits(self.out_dtype), "w"))

    def rules(self, v: Rules) -> bool:
        """A known op with its number of inputs; each input broadcasts to out_shape."""
        super().rules(v)
        if self.op not in ARITY:
            v.add("op", f"unknown element-wise op {self.op!r}")
            return False
        ins = self.inputs()
        lo, hi = ARITY[self.op]
        if not lo <= len(ins) <= hi:
            v.add("op", f"{self.op} takes {lo}..{hi} inputs, got {len(ins)} (in, in2, in3 "
                  "need both a bank and a shape)")
            return False
        if self.op == "cast" and self.to is None:
            v.add("to", "cast needs 'to' (the target element type)")
        ok = True
        for role, shape, _ in ins:
            if len(shape) != len(self.out_shape) or any(
                    d not in (1, o) for d, o in zip(shape, self.out_shape, strict=True)):
                v.add(f"{role}_shape", f"{shape} does not broadcast to out_shape "
                      f"{list(self.out_shape)} (same rank, each dim equal or 1)")
                ok = False
        return ok

    def data(self, env: DataEnv) -> dict[str, Any]:
        """Math op ``ew``: the IR's element-wise kernel on the broadcast inputs."""
        params: dict[str, Any] = {"ew_op": self.op}
        if self.to is not None:
            params["to"] = self.to
        if self.attrs:
            params["attrs"] = dict(self.attrs)
        return self._describe(env, self.inputs(), list(self.out_shape), params)


@register_opcode
class VeCumsumTile(VeTypedTile):
    """(1.1) Cumulative sum along each of ``rows`` vectors of ``length`` (ONNX CumSum on
    the last axis), input and output of ``out_dtype``."""

    cost_op: ClassVar[str] = "sum"  # the default of `cost`
    math_op: ClassVar[str] = "cumsum_rows"
    opcode: Literal["VE_CUMSUM_TILE"] = "VE_CUMSUM_TILE"
    cost: str = Field("sum", description="pe_math cost-table entry (per element).")
    rows: PosInt = Field(1, description="Vectors, packed back to back.")
    length: PosInt = Field(description="Elements per vector.")
    exclusive: bool = Field(False, description="Leave each element itself out of its sum.")
    reverse: bool = Field(False, description="Sum from the end of the vector.")

    @property
    def out_elements(self) -> int:
        return self.rows * self.length

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        b = dtype_bits(self.out_dtype)
        return (TcmRange("in", pe, self.in_bank, self.in_offset, self.out_elements, b, "r"),
                TcmRange("out", pe, self.out_bank, self.out_offset, self.out_elements, b, "w"))

    def data(self, env: DataEnv) -> dict[str, Any]:
        """Math op ``cumsum_rows`` on in ``[rows, length]``."""
        shape = [self.rows, self.length]
        return self._describe(env, [("in", shape, self.out_dtype)], shape,
                              {"exclusive": self.exclusive, "reverse": self.reverse})
