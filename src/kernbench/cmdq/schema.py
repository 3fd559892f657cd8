"""CMDQ entry and program models (pydantic v2), and the byte-count rules of the format.

The format is `spec/cmdq-format-spec.md` (v1.0) plus the additions of CMDQ 1.1 described
in `docs/cmdq.md` (new VE opcodes, optional fields; ADR-0200..). Every addition is an
optional field or a new opcode, so every 1.0 program is a valid 1.1 program.

* One model per opcode; `MODEL_BY_OPCODE` maps the opcode string to it. `Entry` is the
  discriminated union (by ``opcode``) used by `CmdqProgram` and the JSON Schema.
* Unknown fields of a known opcode are kept (``extra="allow"``, spec §14); unknown opcodes
  are rejected by the parser (`kernbench.cmdq.io`).
* Models check what one entry can check on its own: types (strict: no ``"8"`` for 8, no
  ``true`` for 1), non-negative integers, bit widths in {2, 4, 8, 16, 32}. Everything that
  needs the other entries or the topology (ids, dependencies, engine and PE ranges, TCM and
  HBM bounds) is `kernbench.cmdq.validate`.

Byte-count rules (shared by the validator and the simulator; see `entry_tcm_ranges`,
`entry_dram_range`): a tile of ``e`` elements at ``q`` bits takes ``ceil(e * q / 8)``
bytes, packed, starting at its ``*_offset`` byte inside its ``*_bank``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from kernbench.cmdq.limits import CmdqLimits

CMDQ_VERSION = "1.1"
"""The version `kernbench` writes. It reads every 1.x version (see `supported_version`)."""

QBITS_ALLOWED: tuple[int, ...] = (2, 4, 8, 16, 32)
DEFAULT_OFM_QBITS = 32
DEFAULT_PARAM_QBITS = 32

QBits = Literal[2, 4, 8, 16, 32]
NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
PE_PATH_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
PePath = Annotated[str, Field(pattern=PE_PATH_PATTERN)]

# Fields whose value is a bit width (checked against QBITS_ALLOWED).
QBITS_FIELDS: tuple[str, ...] = (
    "qbits", "qbits_weight", "qbits_activation", "ofm_qbits", "bias_qbits", "out_qbits",
    "in2_qbits", "param_qbits",
)
# Integer fields that may legitimately be negative (everything else is >= 0).
SIGNED_INT_FIELDS: frozenset[str] = frozenset({"zero_point", "causal_offset"})
# Fields that list other entries' ids.
DEP_FIELDS: tuple[str, ...] = ("deps_before", "deps_after", "wait_for")


def supported_version(version: str) -> bool:
    """True for the versions this reader understands: every ``1.<minor>``."""
    major, dot, minor = version.partition(".")
    return major == "1" and dot == "." and minor.isdigit()


def tile_bytes(elements: int, qbits: int) -> int:
    """Bytes of ``elements`` packed values of ``qbits`` bits each: ``ceil(elements*qbits/8)``."""
    return (elements * qbits + 7) // 8


class TcmRange(NamedTuple):
    """One TCM operand of an entry: ``elements`` values at ``qbits`` bits from ``offset`` of
    ``bank`` in PE ``pe``. ``role`` is the operand's field prefix (``spm``, ``ifm``, ``wgt``,
    ``ofm``, ``bias``, ``in``, ``in2``, ``out``, ``gamma``, ``beta``, ``cos``, ``sin``):
    its bank is field ``{role}_bank`` and its offset ``{role}_offset``. ``access`` is
    ``"r"``, ``"w"`` or ``"rw"`` (an accumulating GEMM reads and writes its ofm)."""

    role: str
    pe: int
    bank: int
    offset: int
    elements: int
    qbits: int
    access: str

    @property
    def nbytes(self) -> int:
        return tile_bytes(self.elements, self.qbits)

    @property
    def end(self) -> int:
        """Offset one past the last byte, inside the bank."""
        return self.offset + self.nbytes

    @property
    def bank_field(self) -> str:
        return f"{self.role}_bank"

    @property
    def offset_field(self) -> str:
        return f"{self.role}_offset"


class DramRange(NamedTuple):
    """The HBM side of a DMA: ``rows`` runs of ``row_bytes`` contiguous bytes, the first at
    ``addr``, each ``stride_bytes`` after the previous (``stride_bytes == row_bytes`` when
    contiguous). ``write`` is True for DMA_STORE_TILE (TCM → HBM)."""

    addr: int
    rows: int
    row_bytes: int
    stride_bytes: int
    write: bool

    @property
    def nbytes(self) -> int:
        """Bytes moved."""
        return self.rows * self.row_bytes

    @property
    def end(self) -> int:
        """Address one past the last byte touched."""
        return self.addr + (self.rows - 1) * self.stride_bytes + self.row_bytes


# --------------------------------------------------------------------------- entries

_ENTRY_CONFIG = ConfigDict(
    extra="allow",  # spec §14: unknown fields of a known opcode are tolerated and kept
    strict=True,  # JSON types as written: 8 not "8", ints not booleans
    allow_inf_nan=False,
)


class EntryBase(BaseModel):
    """Fields every entry has (spec §5 plus ``pe``)."""

    model_config = _ENTRY_CONFIG

    engine: ClassVar[str] = "control"
    """Which unit executes the entry: ``dma``, ``te``, ``ve``, ``sync`` or ``control``."""

    opcode: str = Field(description="Command kind, e.g. DMA_LOAD_TILE.")
    id: NonNegInt = Field(
        description="0-based index of the entry in `cmdq`; ids must be 0..n-1 in order."
    )
    layer_id: str | None = Field(None, description="IR layer this command belongs to.")
    pe: NonNegInt | PePath | None = Field(
        None,
        description="Target PE: index (0..num_pes-1) or dotted path such as "
        "'sip0.cube0.pe3' (a unique suffix such as 'pe3' also works). Default: the first PE.",
    )
    deps_before: list[NonNegInt] = Field(
        default_factory=list,
        description="Ids of earlier entries that must complete before this one issues.",
    )
    deps_after: list[NonNegInt] = Field(
        default_factory=list,
        description="Ids of later entries that must wait for this one to complete.",
    )
    debug: dict[str, Any] | None = Field(None, description="Free-form debug metadata.")

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        """TCM operands of this entry (none for sync/control entries)."""
        return ()


# DMA ---------------------------------------------------------------------------------


class DmaTile(EntryBase):
    engine: ClassVar[str] = "dma"
    _write_dram: ClassVar[bool] = False

    tensor_role: Literal["weight", "activation", "kv"] = Field(
        "activation", description="What the tile holds."
    )
    qbits: QBits = Field(description="Bit width of one element.")
    dram_addr: NonNegInt = Field(description="HBM physical byte address of the first row.")
    spm_bank: NonNegInt = Field(description="TCM bank of the target PE.")
    spm_offset: NonNegInt = Field(description="Byte offset inside the bank.")
    num_elements: PosInt = Field(description="Elements in the tile (all rows).")
    stride_bytes: NonNegInt | None = Field(
        None,
        description="HBM bytes from one row's start to the next; null or 0: contiguous.",
    )
    rows: PosInt = Field(
        1,
        description="(1.1) Rows of a strided transfer: num_elements/rows contiguous elements "
        "per row in HBM, rows packed back to back in TCM. Used only with stride_bytes.",
    )

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        access = "r" if self._write_dram else "w"
        return (
            TcmRange("spm", pe, self.spm_bank, self.spm_offset, self.num_elements, self.qbits,
                     access),
        )

    @property
    def strided(self) -> bool:
        return bool(self.stride_bytes) and self.rows > 1

    @property
    def nbytes(self) -> int:
        """Bytes moved: ``ceil(num_elements * qbits / 8)``."""
        return tile_bytes(self.num_elements, self.qbits)

    def dram_range(self) -> DramRange:
        if not self.strided:
            n = self.nbytes
            return DramRange(self.dram_addr, 1, n, n, self._write_dram)
        row_bytes = tile_bytes(self.num_elements // self.rows, self.qbits)
        assert self.stride_bytes is not None
        return DramRange(self.dram_addr, self.rows, row_bytes, self.stride_bytes,
                         self._write_dram)


class DmaLoadTile(DmaTile):
    """HBM → TCM (spec §7.1)."""

    opcode: Literal["DMA_LOAD_TILE"] = "DMA_LOAD_TILE"


class DmaStoreTile(DmaTile):
    """TCM → HBM (spec §7.2)."""

    _write_dram: ClassVar[bool] = True
    opcode: Literal["DMA_STORE_TILE"] = "DMA_STORE_TILE"


# TE ----------------------------------------------------------------------------------


class TeTile(EntryBase):
    engine: ClassVar[str] = "te"

    te_id: NonNegInt = Field(0, description="Tensor engine inside the PE (0..te_per_pe-1).")
    ifm_bank: NonNegInt
    ifm_offset: NonNegInt
    wgt_bank: NonNegInt
    wgt_offset: NonNegInt
    ofm_bank: NonNegInt
    ofm_offset: NonNegInt
    qbits_weight: QBits
    qbits_activation: QBits
    ofm_qbits: QBits = Field(
        DEFAULT_OFM_QBITS, description="(1.1) Bit width of the output (accumulator) tile."
    )
    accumulate: bool = Field(
        False, description="(1.1) Add the product to the ofm tile instead of overwriting it."
    )
    bias_bank: NonNegInt | None = Field(
        None, description="(1.1) Bank of an optional bias vector (n values, c_out for conv)."
    )
    bias_offset: NonNegInt | None = None
    bias_qbits: QBits = Field(DEFAULT_OFM_QBITS, description="(1.1) Bias bit width.")

    def _operand_elements(self) -> tuple[int, int, int, int]:
        """(ifm, wgt, ofm, bias) element counts."""
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
    def macs(self) -> int:
        raise NotImplementedError


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

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k


class TeConvTile(TeTile):
    """2-D convolution tile (spec §8.2, fields defined in 1.1).

    ifm is NHWC ``[n, h, w, c_in]``, wgt is ``[kh, kw, c_in, c_out]``, ofm is NHWC
    ``[n, h_out, w_out, c_out]`` with ``h_out = (h + 2*padding - kh) // stride + 1`` (same for
    w). Padding is implicit zeros, not stored.
    """

    opcode: Literal["TE_CONV_TILE"] = "TE_CONV_TILE"
    n: PosInt = Field(1, description="Batch.")
    h: PosInt = Field(description="Input height (unpadded).")
    w: PosInt = Field(description="Input width (unpadded).")
    c_in: PosInt
    c_out: PosInt
    kh: PosInt
    kw: PosInt
    stride: PosInt = 1
    padding: NonNegInt = Field(0, description="Zero padding on each side of h and w.")

    @property
    def out_hw(self) -> tuple[int, int]:
        """(h_out, w_out); a value below 1 means the kernel does not fit (invalid entry)."""
        h_out = (self.h + 2 * self.padding - self.kh) // self.stride + 1
        w_out = (self.w + 2 * self.padding - self.kw) // self.stride + 1
        return h_out, w_out

    def _operand_elements(self) -> tuple[int, int, int, int]:
        h_out, w_out = self.out_hw
        return (
            self.n * self.h * self.w * self.c_in,
            self.kh * self.kw * self.c_in * self.c_out,
            self.n * max(h_out, 0) * max(w_out, 0) * self.c_out,
            self.c_out,
        )

    @property
    def macs(self) -> int:
        h_out, w_out = self.out_hw
        return self.n * max(h_out, 0) * max(w_out, 0) * self.c_out * self.kh * self.kw * self.c_in


# VE ----------------------------------------------------------------------------------


class VeTile(EntryBase):
    """Vector-engine op on ``rows`` vectors; input at qbits_activation, output at out_qbits."""

    engine: ClassVar[str] = "ve"

    ve_id: NonNegInt = Field(0, description="Vector engine inside the PE (0..ve_per_pe-1).")
    in_bank: NonNegInt
    in_offset: NonNegInt
    out_bank: NonNegInt
    out_offset: NonNegInt
    rows: PosInt = Field(1, description="(1.1) Vectors processed; packed back to back.")
    qbits_activation: QBits = Field(description="Bit width of the input.")
    out_qbits: QBits | None = Field(
        None, description="(1.1) Bit width of the output; default qbits_activation."
    )

    @property
    def out_bits(self) -> int:
        return self.out_qbits if self.out_qbits is not None else self.qbits_activation

    @property
    def elements(self) -> int:
        """Elements of the (first) input, and of the output."""
        raise NotImplementedError

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        return []

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        e = self.elements
        return (
            TcmRange("in", pe, self.in_bank, self.in_offset, e, self.qbits_activation, "r"),
            *self._extra_inputs(pe),
            TcmRange("out", pe, self.out_bank, self.out_offset, e, self.out_bits, "w"),
        )


class VeVectorTile(VeTile):
    length: PosInt = Field(description="Elements per vector.")

    @property
    def elements(self) -> int:
        return self.rows * self.length


class VeLayernormTile(VeVectorTile):
    """LayerNorm over each vector (spec §9.1); optional gamma/beta vectors of ``length``."""

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


class VeRmsnormTile(VeVectorTile):
    """(1.1) RMSNorm over each vector; optional gamma vector of ``length``."""

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


class VeSoftmaxTile(VeVectorTile):
    """Softmax over each vector (spec §9.2) of ``scale * x``, with an optional causal mask:
    in row r, element c is masked when ``c > r + causal_offset`` (1.1)."""

    opcode: Literal["VE_SOFTMAX_TILE"] = "VE_SOFTMAX_TILE"
    scale: float = Field(1.0, gt=0, description="(1.1) Multiplier applied before exp.")
    causal_offset: int | None = Field(
        None, description="(1.1) Causal mask diagonal; null: no mask. May be negative."
    )
    bias_bank: NonNegInt | None = Field(
        None, description="(1.1) Additive mask (rows x length fp32) added before the max."
    )
    bias_offset: NonNegInt | None = None

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        if self.bias_bank is None or self.bias_offset is None:
            return []
        return [TcmRange("bias", pe, self.bias_bank, self.bias_offset, self.rows * self.length,
                         32, "r")]


class VeGeluTile(VeVectorTile):
    """(1.1) GELU, exact (erf) or tanh approximation."""

    opcode: Literal["VE_GELU_TILE"] = "VE_GELU_TILE"
    approximate: Literal["none", "tanh"] = "none"


class VeSiluTile(VeVectorTile):
    """(1.1) SiLU: x * sigmoid(x)."""

    opcode: Literal["VE_SILU_TILE"] = "VE_SILU_TILE"


class VeBinaryTile(VeVectorTile):
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


class VeAddTile(VeBinaryTile):
    """(1.1) Element-wise out = in + in2 (in2 may be one broadcast row)."""

    opcode: Literal["VE_ADD_TILE"] = "VE_ADD_TILE"


class VeMulTile(VeBinaryTile):
    """(1.1) Element-wise out = in * in2 (in2 may be one broadcast row)."""

    opcode: Literal["VE_MUL_TILE"] = "VE_MUL_TILE"


class VeRopeTile(VeVectorTile):
    """(1.1) Rotary position embedding on each row (one position per row); a row holds
    ``length / head_dim`` heads. cos/sin tables hold ``rows x head_dim/2`` values."""

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


class VeCopyTile(VeVectorTile):
    """(1.1) Copy rows x length elements (converting to out_qbits if it differs)."""

    opcode: Literal["VE_COPY_TILE"] = "VE_COPY_TILE"


class VeTransposeTile(VeTile):
    """(1.1) out[cols, rows] = in[rows, cols]^T, both row-major and packed."""

    opcode: Literal["VE_TRANSPOSE_TILE"] = "VE_TRANSPOSE_TILE"
    cols: PosInt = Field(description="Input columns (= output rows).")

    @property
    def length(self) -> int:
        """Input row length (``cols``), for code that treats all VE ops alike."""
        return self.cols

    @property
    def elements(self) -> int:
        return self.rows * self.cols


class VeQuantTile(VeVectorTile):
    out_qbits: QBits = Field(description="Output bit width (required).")  # type: ignore[assignment]
    row_scale_bank: NonNegInt | None = Field(
        None, description="(1.1) Per-row scales (rows fp32 values) that replace `scale`."
    )
    row_scale_offset: NonNegInt | None = None

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        if self.row_scale_bank is None or self.row_scale_offset is None:
            return []
        return [TcmRange("row_scale", pe, self.row_scale_bank, self.row_scale_offset,
                         self.rows, 32, "r")]
    scale: float = Field(
        gt=0, description="out = saturate(round_half_even(in / scale) + zero_point) (ONNX)."
    )
    zero_point: int = Field(0, description="Output zero point (may be negative).")


class VeQuantizeTile(VeQuantTile):
    """(1.1) Quantize a (wider, usually float) input to out_qbits integers."""

    opcode: Literal["VE_QUANTIZE_TILE"] = "VE_QUANTIZE_TILE"


class VeRequantizeTile(VeQuantTile):
    """(1.1) Rescale integers (e.g. int32 accumulators) to out_qbits integers."""

    opcode: Literal["VE_REQUANTIZE_TILE"] = "VE_REQUANTIZE_TILE"


class VeDequantizeTile(VeVectorTile):
    """(1.1) out[r, c] = float(in[r, c]) * scale[c] (+ bias[c]): the GEMM epilogue.

    The scale is either a vector of ``length`` fp32 values in TCM (``scale_bank``) or the
    scalar field ``scale``; the optional bias is ``length`` fp32 values (``bias_bank``)."""

    opcode: Literal["VE_DEQUANTIZE_TILE"] = "VE_DEQUANTIZE_TILE"
    scale: float | None = Field(None, description="Scalar scale when no scale vector is given.")
    scale_bank: NonNegInt | None = None
    scale_offset: NonNegInt | None = None
    bias_bank: NonNegInt | None = None
    bias_offset: NonNegInt | None = None
    row_scale_bank: NonNegInt | None = Field(
        None, description="Per-row scales (rows fp32): out = in * (row_scale[r] * scale).")
    row_scale_offset: NonNegInt | None = None

    def _extra_inputs(self, pe: int) -> list[TcmRange]:
        out = []
        if self.row_scale_bank is not None and self.row_scale_offset is not None:
            out.append(TcmRange("row_scale", pe, self.row_scale_bank, self.row_scale_offset,
                                self.rows, 32, "r"))
        if self.scale_bank is not None and self.scale_offset is not None:
            out.append(TcmRange("scale", pe, self.scale_bank, self.scale_offset, self.length,
                                32, "r"))
        if self.bias_bank is not None and self.bias_offset is not None:
            out.append(TcmRange("bias", pe, self.bias_bank, self.bias_offset, self.length,
                                32, "r"))
        return out


class VeRowScaleTile(VeVectorTile):
    """(1.1) out[r] = max_c |in[r, c]| / (2^(bits-1) - 1) as fp32 (1 for an all-zero row):
    the per-row scale a following VE_QUANTIZE_TILE / VE_DEQUANTIZE_TILE uses."""

    opcode: Literal["VE_ROWSCALE_TILE"] = "VE_ROWSCALE_TILE"
    bits: QBits = Field(8, description="Bit width the scale quantizes to.")
    out_qbits: QBits | None = 32

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        return (
            TcmRange("in", pe, self.in_bank, self.in_offset, self.rows * self.length,
                     self.qbits_activation, "r"),
            TcmRange("out", pe, self.out_bank, self.out_offset, self.rows, 32, "w"),
        )


class LayerOp(EntryBase):
    """(1.1) One whole IR layer (`layer_id`) on one PE, streamed HBM → TCM → HBM through the
    scheduler's staging buffers: the compiler's fallback for layers it does not tile.
    Its data semantics are the IR op's (docs/compiler.md)."""

    layer_id: str = Field(description="IR layer to execute.")  # type: ignore[assignment]
    in_bytes: NonNegInt = Field(description="Bytes read from HBM.")
    out_bytes: NonNegInt = Field(description="Bytes written to HBM.")
    dram_addr: NonNegInt = Field(0, description="HBM address the stream starts at (routing).")


class VeLayerOp(LayerOp):
    engine: ClassVar[str] = "ve"
    opcode: Literal["VE_LAYER_OP"] = "VE_LAYER_OP"
    ve_id: NonNegInt = 0
    elements: PosInt = Field(description="Elements computed (vector-engine cost).")
    op: str = Field("copy", description="pe_math cost-table entry that prices the layer.")


class TeLayerOp(LayerOp):
    engine: ClassVar[str] = "te"
    opcode: Literal["TE_LAYER_OP"] = "TE_LAYER_OP"
    te_id: NonNegInt = 0
    m: PosInt
    n: PosInt
    k: PosInt
    qbits_weight: QBits = 8
    qbits_activation: QBits = 8


# SYNC / CONTROL ----------------------------------------------------------------------


class Barrier(EntryBase):
    """Nothing after the barrier issues until every entry of ``wait_for`` completed (§10.1)."""

    engine: ClassVar[str] = "sync"
    opcode: Literal["BARRIER"] = "BARRIER"
    wait_for: list[NonNegInt] = Field(
        default_factory=list, description="Ids of earlier entries to wait for."
    )


class Nop(EntryBase):
    """Does nothing (§10.2)."""

    opcode: Literal["NOP"] = "NOP"


class End(EntryBase):
    """Ends the program; must be the last entry (§10.3)."""

    opcode: Literal["END"] = "END"


ENTRY_MODELS: tuple[type[EntryBase], ...] = (
    DmaLoadTile, DmaStoreTile,
    TeGemmTile, TeConvTile,
    VeLayernormTile, VeSoftmaxTile,
    VeRmsnormTile, VeGeluTile, VeSiluTile, VeAddTile, VeMulTile, VeRopeTile, VeCopyTile,
    VeTransposeTile, VeQuantizeTile, VeRequantizeTile, VeDequantizeTile, VeRowScaleTile,
    VeLayerOp, TeLayerOp,
    Barrier, Nop, End,
)
MODEL_BY_OPCODE: dict[str, type[EntryBase]] = {
    m.model_fields["opcode"].default: m for m in ENTRY_MODELS
}
OPCODES: tuple[str, ...] = tuple(MODEL_BY_OPCODE)
OPCODES_1_0: frozenset[str] = frozenset({
    "DMA_LOAD_TILE", "DMA_STORE_TILE", "TE_GEMM_TILE", "TE_CONV_TILE", "VE_LAYERNORM_TILE",
    "VE_SOFTMAX_TILE", "BARRIER", "NOP", "END",
})

Entry = Annotated[
    DmaLoadTile | DmaStoreTile | TeGemmTile | TeConvTile | VeLayernormTile | VeSoftmaxTile
    | VeRmsnormTile | VeGeluTile | VeSiluTile | VeAddTile | VeMulTile | VeRopeTile
    | VeCopyTile | VeTransposeTile | VeQuantizeTile | VeRequantizeTile | VeDequantizeTile
    | VeRowScaleTile | VeLayerOp | TeLayerOp | Barrier | Nop | End,
    Field(discriminator="opcode"),
]


class CmdqMetadata(BaseModel):
    """Program metadata (spec §4). A program without metadata, or without a version, is
    read as version 1.0; programs kernbench builds default to `CMDQ_VERSION`."""

    model_config = ConfigDict(extra="allow", strict=True)

    version: str = Field(CMDQ_VERSION, description="CMDQ format version, '1.<minor>'.")
    graph_name: str | None = None
    generated_by: str | None = None
    created_at: str | None = None


class CmdqProgram(BaseModel):
    """A whole CMDQ file: the entries and the metadata."""

    model_config = ConfigDict(extra="allow", strict=True)

    cmdq: list[Entry]
    metadata: CmdqMetadata = Field(default_factory=CmdqMetadata)


# --------------------------------------------------------------------------- helpers


def entry_pe_index(entry: EntryBase, limits: CmdqLimits | None = None) -> int:
    """The PE index an entry targets (``pe`` resolved; None → 0).

    A dotted-path ``pe`` needs ``limits``; raises ValueError when it names no PE.
    """
    pe = entry.pe
    if limits is not None:
        return limits.pe_index(pe)
    if pe is None:
        return 0
    if isinstance(pe, int):
        return pe
    raise ValueError(f"pe {pe!r} is a path: pass limits to resolve it")


def entry_tcm_ranges(entry: EntryBase, limits: CmdqLimits | None = None) -> tuple[TcmRange, ...]:
    """The TCM operands of an entry, in the order they are read then written.

    DMA: the tile (``num_elements`` at ``qbits``). TE GEMM: ifm ``m*k`` at
    qbits_activation, wgt ``k*n`` at qbits_weight, [bias ``n`` at bias_qbits], ofm ``m*n``
    at ofm_qbits (default 32). TE conv: see `TeConvTile`. VE: in ``rows*length`` at
    qbits_activation, [extra inputs], out ``rows*length`` at out_qbits (default
    qbits_activation). BARRIER/NOP/END: none. ``limits`` resolves a dotted-path ``pe``.
    """
    return entry.tcm_ranges(entry_pe_index(entry, limits))


def entry_dram_range(entry: EntryBase) -> DramRange | None:
    """The HBM side of a DMA entry (None for non-DMA entries)."""
    if isinstance(entry, DmaTile):
        return entry.dram_range()
    return None


def entry_macs(entry: EntryBase) -> int:
    """Multiply-accumulates of a TE entry (0 for others): m*n*k for GEMM,
    n*h_out*w_out*c_out*kh*kw*c_in for conv."""
    if isinstance(entry, TeTile):
        return entry.macs
    return 0


def entry_elements(entry: EntryBase) -> int:
    """Elements an entry processes: DMA num_elements, VE rows*length (rows*cols for
    transpose), TE output elements; 0 for sync/control."""
    if isinstance(entry, DmaTile):
        return entry.num_elements
    if isinstance(entry, VeTile):
        return entry.elements
    if isinstance(entry, TeTile):
        return entry._operand_elements()[2]
    return 0


def entry_wait_ids(entry: EntryBase) -> list[int]:
    """Ids this entry names as its own predecessors: deps_before, plus wait_for of a BARRIER."""
    if isinstance(entry, Barrier):
        return [*entry.deps_before, *entry.wait_for]
    return list(entry.deps_before)


def program_predecessors(program: CmdqProgram) -> list[tuple[int, ...]]:
    """For each entry (by index), the sorted ids that must complete before it issues:
    its deps_before and (BARRIER) wait_for, plus every earlier entry that lists it in
    deps_after. Assumes a validated program (ids = indices). The BARRIER's fence on later
    entries is not included: that is issue order, the Control FSM's business."""
    preds: list[set[int]] = [set(entry_wait_ids(e)) for e in program.cmdq]
    for e in program.cmdq:
        for later in e.deps_after:
            if 0 <= later < len(preds):
                preds[later].add(e.id)
    return [tuple(sorted(p)) for p in preds]


def cmdq_json_schema() -> dict[str, Any]:
    """The JSON Schema of a CMDQ file, as committed in ``schemas/cmdq.schema.json``."""
    schema = CmdqProgram.model_json_schema()
    # `opcode` has a default in Python (so models can be built without it) but a file must
    # always say it: it selects the model.
    for definition in schema.get("$defs", {}).values():
        props = definition.get("properties", {})
        if "opcode" in props and "const" in props["opcode"]:
            props["opcode"].pop("default", None)
            required = definition.setdefault("required", [])
            if "opcode" not in required:
                required.insert(0, "opcode")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://kernbench.dev/schemas/cmdq.schema.json",
        "title": f"kernbench CMDQ program (format {CMDQ_VERSION})",
        "description": "Generated from kernbench.cmdq.schema by scripts/gen_cmdq_schema.py; "
        "do not edit. Topology-dependent rules (ids, dependencies, engine/PE ranges, "
        "TCM/HBM bounds) are checked by kernbench.cmdq.validate, not by this schema.",
        **{k: v for k, v in schema.items() if k not in ("title", "description")},
    }


def cmdq_json_schema_text() -> str:
    """`cmdq_json_schema` as the exact text of ``schemas/cmdq.schema.json``."""
    import json

    return json.dumps(cmdq_json_schema(), indent=2, ensure_ascii=False) + "\n"
