"""Vector-engine opcodes of attention blocked along the KV sequence (1.1): one
step of the online softmax and the merge of a block's P·V into the running output; and
the combine of a key range's partial output computed on another PE
(flash-decoding).

A row's running state is 4 fp32 values (m running max, l running sum, alpha the last
rescale factor, unused) in TCM, read and rewritten by VE_SOFTMAX_BLOCK_TILE and read by
VE_ATTN_MERGE_TILE. Data: `kernbench.numerics.flash` through the data-pass ops
``flash_softmax_block``, ``flash_merge`` and ``flash_combine``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from kernbench.cmdq.opcodes.base import DataEnv, Lowering, NonNegInt, PosInt, QBits, TcmRange
from kernbench.cmdq.opcodes.registry import register_opcode
from kernbench.cmdq.opcodes.ve import MathData, VeVectorTile
from kernbench.common.pe_commands import PeCommand
from kernbench.errors import InputError

#: fp32 values of the running state per row (numerics.flash.STATE_WIDTH)
STATE_WIDTH = 4


def _state(pe: int, bank: int, offset: int, rows: int, access: str) -> TcmRange:
    return TcmRange("state", pe, bank, offset, rows * STATE_WIDTH, 32, access)


def _out_and_state(d: MathData, env: DataEnv, rows: int, length: int) -> dict[str, Any]:
    """The data description of an op with two fp32 outputs: ``out`` (rows × length) and
    the running state (rows × 4), both written back to their TCM ranges."""
    desc = d.description()
    for key in ("dst_addr", "shape_out", "dtype"):
        desc.pop(key)
    desc.update({"dst_addrs": [env.addr("out"), env.addr("state")],
                 "shapes_out": [[rows, length], [rows, STATE_WIDTH]],
                 "dtypes_out": ["float32", "float32"]})
    return desc


@register_opcode
class VeSoftmaxBlockTile(VeVectorTile):
    """(1.1) One KV block of the online softmax over ``rows`` score vectors of ``length``:
    x = in (+ bias) (+ causal mask: column c masked when c > r + causal_offset);
    m' = max(m, max x), out = exp(x - m') (fp32, 0 where masked), alpha = exp(m - m'),
    l' = l·alpha + Σ out; the state (m, l, alpha, 0) per row is updated in place."""

    cost_op: ClassVar[str] = "softmax"
    math_op: ClassVar[str] = "flash_softmax_block"
    signed_fields: ClassVar[frozenset[str]] = frozenset({"causal_offset"})
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_SOFTMAX_BLOCK_TILE"] = "VE_SOFTMAX_BLOCK_TILE"
    causal_offset: int | None = Field(
        None, description="Causal mask diagonal of this block; null: no mask. May be negative.")
    bias_bank: NonNegInt | None = Field(
        None, description="Additive mask (rows x length floats) of the block.")
    bias_offset: NonNegInt | None = None
    bias_qbits: QBits = Field(32, description="Bit width of the float mask (32, 16).")
    state_bank: NonNegInt = Field(description="Running state (rows x 4 fp32), in place.")
    state_offset: NonNegInt

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        out = [_state(pe, self.state_bank, self.state_offset, self.rows, "rw")]
        if self.bias_bank is not None and self.bias_offset is not None:
            out.append(TcmRange("bias", pe, self.bias_bank, self.bias_offset,
                                self.rows * self.length, self.bias_qbits, "r"))
        return out

    def data(self, env: DataEnv) -> dict[str, Any]:
        """Inputs in [, bias], state; outputs out (fp32) and the state."""
        d = MathData(self, env)
        if self.bias_bank is not None:
            d.add("bias", [self.rows, self.length], self.float_dtype(self.bias_qbits))
            d.params["has_bias"] = True
        d.add("state", [self.rows, STATE_WIDTH])
        d.params["causal_offset"] = self.causal_offset
        return _out_and_state(d, env, self.rows, self.length)


@register_opcode
class VeAttnMergeTile(VeVectorTile):
    """(1.1) out = out·alpha + float(in)·(row_scale·scale) over ``rows`` vectors of
    ``length`` (in: the block's int32 P·V, or its fp32 one when the entry says
    ``in_dtype: float32``, a float attention's; with ``first`` the old out is not read);
    with ``last`` the result is divided by the running sum l (0 where l = 0)."""

    cost_op: ClassVar[str] = "dequantize"
    math_op: ClassVar[str] = "flash_merge"
    opcode: Literal["VE_ATTN_MERGE_TILE"] = "VE_ATTN_MERGE_TILE"
    scale: float = Field(gt=0, description="Scale of the V operand (s_v).")
    first: bool = Field(False, description="First block: the old out is not read.")
    last: bool = Field(False, description="Last block: divide by the running sum.")
    row_scale_bank: NonNegInt = Field(description="Per-row scales of the quantized P.")
    row_scale_offset: NonNegInt
    state_bank: NonNegInt = Field(description="Running state (rows x 4 fp32).")
    state_offset: NonNegInt

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        e = self.elements
        return (
            TcmRange("in", pe, self.in_bank, self.in_offset, e, self.qbits_activation, "r"),
            TcmRange("row_scale", pe, self.row_scale_bank, self.row_scale_offset, self.rows,
                     32, "r"),
            _state(pe, self.state_bank, self.state_offset, self.rows, "r"),
            TcmRange("out", pe, self.out_bank, self.out_offset, e, 32,
                     "w" if self.first else "rw"),
        )

    def data_params(self, d: MathData) -> None:
        """Inputs in (int32, or fp32 with ``in_dtype: float32``), row_scale, state [, the
        old out]."""
        in_dtype = getattr(self, "in_dtype", None) or "int32"
        if in_dtype not in ("int32", "float32"):
            raise InputError(f"entry {self.id} (VE_ATTN_MERGE_TILE): in_dtype {in_dtype!r} "
                             "is not int32 or float32")
        d.dtypes[0] = in_dtype
        d.add("row_scale", [self.rows, 1])
        d.add("state", [self.rows, STATE_WIDTH])
        if not self.first:
            d.add("out", [self.rows, self.length])
        d.dtype = "float32"
        d.params.update({"scale": self.scale, "first": self.first, "last": self.last})


@register_opcode
class VeAttnCombineTile(VeVectorTile):
    """(1.1) Fold ``parts`` key ranges' unnormalized attention outputs ``in`` (``parts`` ×
    ``rows`` vectors of ``length`` fp32) and their states ``part_state`` (``parts`` ×
    ``rows`` × 4) into the running output ``out`` and state, one part after another in
    order: m' = max(m, m_p), a = exp(m - m'), b = exp(m_p - m'), l' = l·a + l_p·b,
    out = out·a + in·b, state = (m', l', a, 0); with ``last`` out is divided by l' after
    the last part (0 where l' = 0). Both ``out`` and the state are updated in place."""

    cost_op: ClassVar[str] = "dequantize"
    math_op: ClassVar[str] = "flash_combine"
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_ATTN_COMBINE_TILE"] = "VE_ATTN_COMBINE_TILE"
    last: bool = Field(False, description="Last part: divide by the running sum.")
    parts: PosInt = Field(1, description="Key ranges in `in` and `part_state`, "
                                         "folded in order.")
    part_state_bank: NonNegInt = Field(description="The parts' states (parts x rows x 4 "
                                                   "fp32).")
    part_state_offset: NonNegInt
    state_bank: NonNegInt = Field(description="Running state (rows x 4 fp32), in place.")
    state_offset: NonNegInt

    @property
    def work_elements(self) -> int:
        return self.parts * self.elements

    def command(self, low: Lowering) -> PeCommand:
        """Every part is one fold over ``rows × length``: the parts cost as that many
        rows."""
        cmd = super().command(low)
        cmd.params["rows"] = self.parts * self.rows
        return cmd

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        e = self.elements
        return (
            TcmRange("in", pe, self.in_bank, self.in_offset, self.parts * e, 32, "r"),
            TcmRange("part_state", pe, self.part_state_bank, self.part_state_offset,
                     self.parts * self.rows * STATE_WIDTH, 32, "r"),
            _state(pe, self.state_bank, self.state_offset, self.rows, "rw"),
            TcmRange("out", pe, self.out_bank, self.out_offset, e, 32, "rw"),
        )

    def data(self, env: DataEnv) -> dict[str, Any]:
        """Inputs in, part_state, state, out; outputs out and the state (fp32)."""
        d = MathData(self, env)
        d.dtypes[0] = "float32"
        d.shapes[0] = [self.parts, self.rows, self.length]
        d.add("part_state", [self.parts, self.rows, STATE_WIDTH])
        d.add("state", [self.rows, STATE_WIDTH])
        d.add("out", [self.rows, self.length])
        d.params["last"] = self.last
        return _out_and_state(d, env, self.rows, self.length)
