"""Vector-engine opcodes (spec §9 and the 1.1 additions): norms, softmax, activations,
element-wise binaries, RoPE, copy and transpose. The quantization family is in
`ve_quant`.

Lowering: a MathCmd on the PE's pe_math{ve_id}: fetch the inputs, the pe_math op
``cost_op`` on rows × length, store the output. Data: a ``math`` description naming the
data pass's op ``math_op`` (built by `MathData`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from kernbench.cmdq.data import dtype_of
from kernbench.cmdq.opcodes.base import (
    DEFAULT_PARAM_QBITS,
    F16_FORMAT_DOC,
    DataEnv,
    F16Format,
    Lowering,
    NonNegInt,
    OnVectorEngine,
    PosInt,
    QBits,
    Rules,
    TcmRange,
    require_math_op,
)
from kernbench.cmdq.opcodes.registry import register_opcode
from kernbench.common.pe_commands import MathCmd, PeCommand
from kernbench.errors import InputError
from kernbench.numerics.dtypes import np_dtype


class MathData:
    """The ``"data"`` description of a VE entry being built: the first input ``in``
    (``rows × length``), extra inputs added by `add`, the op's parameters, the output."""

    def __init__(self, e: VeTile, env: DataEnv) -> None:
        self.entry = e
        self.env = env
        self.op = e.math_op
        in_dt = getattr(e, "in_dtype", None) or e.float_dtype(e.qbits_activation)
        self.addrs = [env.addr("in")]
        self.shapes = [[e.rows, e.length]]
        self.dtypes = [in_dt]
        self.params: dict[str, Any] = {}
        self.shape_out = [e.rows, e.length]
        self.dtype = e.float_dtype(e.out_bits)

    def add(self, role: str, shape: list[int], dt: str = "float32") -> None:
        """One more input: operand ``role`` of ``shape`` elements of ``dt``."""
        self.addrs.append(self.env.addr(role))
        self.shapes.append(shape)
        self.dtypes.append(dt)

    def description(self) -> dict[str, Any]:
        """The finished description; InputError when the data pass has no such op."""
        e = self.entry
        require_math_op(e, self.op)
        return {"op_kind": "math", "op_name": e.opcode.lower(), "op": self.op,
                "space": self.env.space, "input_addrs": self.addrs, "input_shapes": self.shapes,
                "input_dtypes": self.dtypes, "dst_addr": self.env.addr("out"),
                "shape_out": self.shape_out, "dtype": self.dtype, **self.params}


class VeTile(OnVectorEngine):
    """Vector-engine op on ``rows`` vectors; input at qbits_activation, output at out_qbits."""

    in_bank: NonNegInt
    in_offset: NonNegInt
    out_bank: NonNegInt
    out_offset: NonNegInt
    rows: PosInt = Field(1, description="(1.1) Vectors processed; packed back to back.")
    qbits_activation: QBits = Field(description="Bit width of the input.")
    out_qbits: QBits | None = Field(
        None, description="(1.1) Bit width of the output; default qbits_activation."
    )
    f16_format: F16Format | None = Field(None, description=F16_FORMAT_DOC)

    def float_dtype(self, bits: int) -> str:
        """The element type of a `bits`-wide float operand of this entry."""
        return dtype_of(bits, False, self.f16_format)

    @property
    def out_bits(self) -> int:
        return self.out_qbits if self.out_qbits is not None else self.qbits_activation

    @property
    def elements(self) -> int:
        """Elements of the (first) input, and of the output."""
        raise NotImplementedError

    @property
    def work_elements(self) -> int:
        return self.elements

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        return []

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        e = self.elements
        return (
            TcmRange("in", pe, self.in_bank, self.in_offset, e, self.qbits_activation, "r"),
            *self._extra_inputs(pe),
            TcmRange("out", pe, self.out_bank, self.out_offset, e, self.out_bits, "w"),
        )

    def command(self, low: Lowering) -> PeCommand:
        rd, wr = self.traffic(low.pe)
        params = {"op": self.cost_op, "length": self.length, "rows": self.rows,
                  "ve_id": self.ve_id, "entry": self.id}
        return MathCmd(label=low.label, params=params, fetch_nbytes=rd, store_nbytes=wr,
                       meta=low.meta)

    def data(self, env: DataEnv) -> dict[str, Any]:
        """A ``math`` description: `math_op` on the inputs, with `data_params`'s changes
        (and an `IntScales` entry's integer operand scales)."""
        d = MathData(self, env)
        self.data_params(d)
        if isinstance(self, IntScales):
            self.scale_params(d)
        return d.description()

    def data_params(self, d: MathData) -> None:
        """The opcode's extra inputs and op parameters (none by default)."""


class IntScales(BaseModel):
    """Scales of the integer operands of a §9 vector op. An integer ``in`` /
    ``in2`` holds q with real value q · in_scale; an integer output holds
    saturate(rint(y / out_scale)). Float operands ignore both."""

    in_scale: float | None = Field(
        None, gt=0, description="Real value of one step of an integer input "
        "(in, in2): x = q · in_scale. Default 1 (the integers are the values).")
    out_scale: float | None = Field(
        None, gt=0, description="Step of an integer output: q = saturate(rint(y / "
        "out_scale)). Default: 1 / (2^(out_bits-1) - 1) for softmax (probabilities in "
        "[0, 1] span the signed range), else in_scale.")

    def default_out_scale(self, out_bits: int) -> float:
        """out_scale when the entry does not set it."""
        return self.in_scale if self.in_scale is not None else 1.0

    #: a pure data move (copy, transpose) with neither scale set moves its values as
    #: they are (both steps default to 1 and equal)
    moves_data: ClassVar[bool] = False

    def scale_params(self, d: MathData) -> None:
        """``in_scales`` (one per input, None for float ones) and ``out_scale`` (integer
        output only) of the data pass's description."""
        if self.moves_data and self.in_scale is None and self.out_scale is None:
            return
        scale = self.in_scale if self.in_scale is not None else 1.0
        ins = [scale if np_dtype(dt).kind in "iu" and i < 2 else None
               for i, dt in enumerate(d.dtypes)]
        if any(x is not None for x in ins):
            d.params["in_scales"] = ins
        if np_dtype(d.dtype).kind in "iu":
            out_bits = getattr(self, "out_bits", 32)
            d.params["out_scale"] = (self.out_scale if self.out_scale is not None
                                     else self.default_out_scale(out_bits))


class VeVectorTile(VeTile):
    length: PosInt = Field(description="Elements per vector.")

    @property
    def elements(self) -> int:
        return self.rows * self.length


@register_opcode
class VeLayernormTile(VeVectorTile, IntScales):
    """LayerNorm over each vector (spec §9.1); optional gamma/beta vectors of ``length``."""

    since: ClassVar[str] = "1.0"
    cost_op: ClassVar[str] = "layernorm"
    math_op: ClassVar[str] = "layernorm"
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_LAYERNORM_TILE"] = "VE_LAYERNORM_TILE"
    eps: float = Field(1e-5, ge=0)
    gamma_bank: NonNegInt | None = Field(None, description="(1.1) Scale vector bank.")
    gamma_offset: NonNegInt | None = None
    beta_bank: NonNegInt | None = Field(None, description="(1.1) Shift vector bank.")
    beta_offset: NonNegInt | None = None
    param_qbits: QBits = Field(DEFAULT_PARAM_QBITS, description="(1.1) gamma/beta bit width.")

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        out = []
        if self.gamma_bank is not None and self.gamma_offset is not None:
            out.append(TcmRange("gamma", pe, self.gamma_bank, self.gamma_offset, self.length,
                                self.param_qbits, "r"))
        if self.beta_bank is not None and self.beta_offset is not None:
            out.append(TcmRange("beta", pe, self.beta_bank, self.beta_offset, self.length,
                                self.param_qbits, "r"))
        return out

    def data_params(self, d: MathData) -> None:
        d.params = {"eps": self.eps, "axis": -1}
        for role in ("gamma", "beta"):
            if getattr(self, f"{role}_bank", None) is not None:
                d.add(role, [self.length], self.float_dtype(self.param_qbits))


@register_opcode
class VeSoftmaxTile(VeVectorTile, IntScales):
    """Softmax over each vector (spec §9.2) of ``scale * x``, with an optional causal mask:
    in row r, element c is masked when ``c > r + causal_offset`` (1.1), an optional
    soft-cap ``c·tanh(x / c)`` and additive bias (1.1, applied in that order)."""

    since: ClassVar[str] = "1.0"
    cost_op: ClassVar[str] = "softmax"
    math_op: ClassVar[str] = "attn_softmax"
    signed_fields: ClassVar[frozenset[str]] = frozenset({"causal_offset"})
    opcode: Literal["VE_SOFTMAX_TILE"] = "VE_SOFTMAX_TILE"
    scale: float = Field(1.0, gt=0, description="(1.1) Multiplier applied before exp.")
    causal_offset: int | None = Field(
        None, description="(1.1) Causal mask diagonal; null: no mask. May be negative."
    )
    bias_bank: NonNegInt | None = Field(
        None, description="(1.1) Additive mask (rows x length fp32) added before the max."
    )
    bias_offset: NonNegInt | None = None
    bias_qbits: QBits = Field(32, description="(1.1) Bit width of the float bias (32, 16).")
    softcap: float | None = Field(
        None, gt=0, description="(1.1) Soft-cap c: x becomes c·tanh(x / c) before the bias."
    )

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        if self.bias_bank is None or self.bias_offset is None:
            return []
        return [TcmRange("bias", pe, self.bias_bank, self.bias_offset, self.rows * self.length,
                         self.bias_qbits, "r")]

    def default_out_scale(self, out_bits: int) -> float:
        """Probabilities in [0, 1] span the signed integer range: 1 / qmax."""
        return 1.0 / ((1 << (out_bits - 1)) - 1)

    def data_params(self, d: MathData) -> None:
        if self.bias_bank is not None:
            d.add("bias", [self.rows, self.length], self.float_dtype(self.bias_qbits))
            d.params["has_bias"] = True
        d.params["causal_offset"] = self.causal_offset
        d.params["scale"] = self.scale
        if self.softcap is not None:
            d.params["softcap"] = self.softcap


@register_opcode
class VeRmsnormTile(VeVectorTile, IntScales):
    """(1.1) RMSNorm over each vector; optional gamma vector of ``length``."""

    cost_op: ClassVar[str] = "rmsnorm"
    math_op: ClassVar[str] = "rmsnorm"
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_RMSNORM_TILE"] = "VE_RMSNORM_TILE"
    eps: float = Field(1e-6, ge=0)
    gamma_bank: NonNegInt | None = None
    gamma_offset: NonNegInt | None = None
    param_qbits: QBits = DEFAULT_PARAM_QBITS

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        if self.gamma_bank is None or self.gamma_offset is None:
            return []
        return [TcmRange("gamma", pe, self.gamma_bank, self.gamma_offset, self.length,
                         self.param_qbits, "r")]

    def data_params(self, d: MathData) -> None:
        d.params = {"eps": self.eps, "axis": -1}
        if self.gamma_bank is not None:
            d.add("gamma", [self.length], self.float_dtype(self.param_qbits))


@register_opcode
class VeGeluTile(VeVectorTile, IntScales):
    """(1.1) GELU, exact (erf) or tanh approximation."""

    cost_op: ClassVar[str] = "gelu"
    math_op: ClassVar[str] = "gelu"
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_GELU_TILE"] = "VE_GELU_TILE"
    approximate: Literal["none", "tanh"] = "none"

    def data_params(self, d: MathData) -> None:
        d.params = {"approximate": self.approximate}


@register_opcode
class VeSiluTile(VeVectorTile, IntScales):
    """(1.1) SiLU: x * sigmoid(x)."""

    cost_op: ClassVar[str] = "silu"
    math_op: ClassVar[str] = "silu"
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_SILU_TILE"] = "VE_SILU_TILE"


class VeBinaryTile(VeVectorTile, IntScales):
    in2_bank: NonNegInt = Field(description="Second input's bank.")
    in2_offset: NonNegInt
    in2_rows: PosInt | None = Field(
        None, description="Rows of the second input: rows (default) or 1 (broadcast)."
    )
    in2_qbits: QBits | None = Field(
        None, description="Second input's bit width; default qbits_activation."
    )

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        rows2 = self.in2_rows if self.in2_rows is not None else self.rows
        q2 = self.in2_qbits if self.in2_qbits is not None else self.qbits_activation
        return [TcmRange("in2", pe, self.in2_bank, self.in2_offset, rows2 * self.length, q2, "r")]

    def rules(self, v: Rules) -> bool:
        """``in2_rows`` is 1 (broadcast) or rows."""
        super().rules(v)
        if self.in2_rows is not None and self.in2_rows not in (1, self.rows):
            v.add("in2_rows", f"must be 1 (broadcast) or rows ({self.rows}), "
                  f"got {self.in2_rows}")
            return False
        return True

    def data_params(self, d: MathData) -> None:
        rows2 = self.in2_rows if self.in2_rows is not None else self.rows
        d.add("in2", [rows2, self.length],
              self.float_dtype(self.in2_qbits or self.qbits_activation))


@register_opcode
class VeAddTile(VeBinaryTile):
    """(1.1) Element-wise out = in + in2 (in2 may be one broadcast row)."""

    cost_op: ClassVar[str] = "add"
    math_op: ClassVar[str] = "add"
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_ADD_TILE"] = "VE_ADD_TILE"


@register_opcode
class VeMulTile(VeBinaryTile):
    """(1.1) Element-wise out = in * in2 (in2 may be one broadcast row)."""

    cost_op: ClassVar[str] = "mul"
    math_op: ClassVar[str] = "mul"
    chain_step: ClassVar[bool] = True
    opcode: Literal["VE_MUL_TILE"] = "VE_MUL_TILE"


@register_opcode
class VeRopeTile(VeVectorTile, IntScales):
    """(1.1) Rotary position embedding on each row (one position per row); a row holds
    ``length / head_dim`` heads. cos/sin tables hold ``rows x head_dim/2`` values."""

    cost_op: ClassVar[str] = "rope"
    math_op: ClassVar[str] = "rope"
    opcode: Literal["VE_ROPE_TILE"] = "VE_ROPE_TILE"
    head_dim: PosInt | None = Field(None, description="Even; divides length. Default: length.")
    style: Literal["half", "interleaved"] = Field(
        "half", description="'half': rotate_half (Llama/NeoX); 'interleaved': pairs (GPT-J)."
    )
    cos_bank: NonNegInt | None = None
    cos_offset: NonNegInt | None = None
    sin_bank: NonNegInt | None = None
    sin_offset: NonNegInt | None = None
    param_qbits: QBits = Field(DEFAULT_PARAM_QBITS, description="cos/sin table bit width.")

    @property
    def head_dim_or_length(self) -> int:
        return self.head_dim if self.head_dim is not None else self.length

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        e = self.rows * (self.head_dim_or_length // 2)
        out = []
        if self.cos_bank is not None and self.cos_offset is not None:
            out.append(TcmRange("cos", pe, self.cos_bank, self.cos_offset, e, self.param_qbits,
                                "r"))
        if self.sin_bank is not None and self.sin_offset is not None:
            out.append(TcmRange("sin", pe, self.sin_bank, self.sin_offset, e, self.param_qbits,
                                "r"))
        return out

    def rules(self, v: Rules) -> bool:
        """``head_dim`` is even and divides ``length``."""
        super().rules(v)
        hd = self.head_dim_or_length
        if hd % 2:
            v.add("head_dim" if self.head_dim is not None else "length",
                  f"RoPE head_dim must be even, got {hd}")
            return False
        if self.length % hd:
            v.add("head_dim", f"head_dim {hd} does not divide length {self.length}")
            return False
        return True

    def data_params(self, d: MathData) -> None:
        """Params ``head_dim`` and ``style``; inputs cos and sin (``rows × head_dim/2``
        values each, ``param_qbits``), required for data."""
        hd = self.head_dim_or_length
        if self.cos_bank is None or self.sin_bank is None:
            raise InputError(f"{self.opcode} needs cos_bank and sin_bank: the data pass has no "
                             "rotation tables otherwise", where=f"entry {self.id}",
                             field="cos_bank")
        d.params = {"head_dim": hd, "style": self.style}
        for role in ("cos", "sin"):
            d.add(role, [self.rows, hd // 2], self.float_dtype(self.param_qbits))


@register_opcode
class VeCopyTile(VeVectorTile, IntScales):
    """(1.1) Copy rows x length elements (converting to out_qbits if it differs)."""

    moves_data: ClassVar[bool] = True

    cost_op: ClassVar[str] = "copy"
    math_op: ClassVar[str] = "cast"
    opcode: Literal["VE_COPY_TILE"] = "VE_COPY_TILE"


@register_opcode
class VeTransposeTile(VeTile, IntScales):
    """(1.1) out[cols, rows] = in[rows, cols]^T, both row-major and packed."""

    moves_data: ClassVar[bool] = True

    cost_op: ClassVar[str] = "transpose"
    math_op: ClassVar[str] = "transpose"
    opcode: Literal["VE_TRANSPOSE_TILE"] = "VE_TRANSPOSE_TILE"
    cols: PosInt = Field(description="Input columns (= output rows).")

    @property
    def length(self) -> int:
        """Input row length (``cols``), for code that treats all VE ops alike."""
        return self.cols

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    def data_params(self, d: MathData) -> None:
        d.shape_out = [self.cols, self.rows]
