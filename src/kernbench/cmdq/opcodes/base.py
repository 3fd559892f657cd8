"""The opcode base class: every fact of a CMDQ opcode lives on its class.

An opcode class is a pydantic model (the payload fields) plus class-level facts, in the
spirit of an xDSL op definition:

* ``opcode``      the Literal field that selects the class (the tagged-union key);
* ``engine``      the unit that executes it: ``dma``, ``te``, ``ve``, ``sync`` or ``control``;
* ``since``       the CMDQ version that introduced it (``"1.0"`` or ``"1.1"``);
* ``timing``      the PE command it lowers to: ``dma``, ``gemm``, ``math``, ``composite``
  or ``control``; ``cost_op`` names the pe_math cost-table entry of a ``math`` opcode;
  ``chain_step``: the compiler may chain it into a VE_FUSED_TILE;
* ``data``        its data semantics: a method ``data(env) -> dict`` building the
  ``"data"`` description the data pass executes, or the marker `NO_DATA` (control);
* methods: ``tcm_ranges`` / ``dram_range`` (the bytes it touches), ``rules`` and
  ``check_hbm`` (its validation rules), ``cost_ops`` (what the simulator prices it by),
  ``command`` / ``control_entry`` (its lowering to a PE command or Control-FSM entry) and
  ``unit`` (the component it keeps busy, for stats).

`kernbench.cmdq.opcodes.registry` collects the classes; parsing, validation, lowering and
the JSON Schema all read the registry, so adding an opcode is adding one class.

Byte-count rule shared by all of them: a tile of ``e`` elements at ``q`` bits takes
``ceil(e * q / 8)`` bytes, packed, starting at its ``*_offset`` byte inside its ``*_bank``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field

from kernbench.cmdq.limits import CmdqLimits
from kernbench.common.pe_commands import PeCommand
from kernbench.common.program import ProgramEntry
from kernbench.errors import InputError
from kernbench.sim_engine.math_ops import MATH_OPS

QBITS_ALLOWED: tuple[int, ...] = (2, 4, 8, 16, 32)
DEFAULT_OFM_QBITS = 32
DEFAULT_PARAM_QBITS = 32

QBits = Literal[2, 4, 8, 16, 32]
#: A TE tile's output width: QBits plus 64, an int64 accumulator.
OfmQBits = Literal[2, 4, 8, 16, 32, 64]
F16Format = Literal["fp16", "bf16"]
F16_FORMAT_DOC = ("(1.1) Format of the entry's 16-bit float operands: fp16 (the default) or "
                  "bf16.")
NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
PE_PATH_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
PePath = Annotated[str, Field(pattern=PE_PATH_PATTERN)]

ENGINES: tuple[str, ...] = ("dma", "te", "ve", "sync", "control")
TIMINGS: tuple[str, ...] = ("dma", "gemm", "math", "composite", "control")

NO_DATA = "control: no data"
"""The `data` of an opcode that moves or computes nothing (BARRIER, NOP, END)."""


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


class Rules(Protocol):
    """What an opcode's validation rules see: the hardware limits and a problem sink
    (one problem = one field and one reason; the validator adds file and entry)."""

    limits: CmdqLimits

    def add(self, field: str | None, reason: str) -> None: ...


class DataEnv(Protocol):
    """What an opcode's data semantics see when its command is built: the PE's TCM address
    space (``"tcm:<pe id>"``), byte addresses of operand roles in it, and, for whole IR
    layers, the host's hook that attaches the layer's reference kernel (it needs the IR,
    which the ISA never imports)."""

    space: str
    bank_bytes: int

    def addr(self, role: str) -> int: ...

    def space_of(self, pe: int) -> str: ...

    def ir_layer(self, entry: Opcode) -> None: ...


class TcmDataEnv:
    """The `DataEnv` of one entry on one PE: operand addresses from the entry's own
    ``{role}_bank`` / ``{role}_offset`` fields. It has no IR: a whole-layer entry is refused
    (the host's environment, which has the bundle's IR, handles those)."""

    def __init__(self, entry: Opcode, pe_id: str, bank_bytes: int,
                 pe_ids: tuple[str, ...] = ()) -> None:
        self.entry = entry
        self.space = f"tcm:{pe_id}"
        self.bank_bytes = bank_bytes
        self.pe_ids = pe_ids

    def space_of(self, pe: int) -> str:
        """The TCM address space of PE index `pe` (an entry that writes another PE's TCM)."""
        if not 0 <= pe < len(self.pe_ids):
            raise InputError(f"{self.entry.opcode} names PE {pe}, which this data environment "
                             f"does not know ({len(self.pe_ids)} PEs)",
                             where=f"entry {self.entry.id}", field="dst_pes")
        return f"tcm:{self.pe_ids[pe]}"

    def addr(self, role: str) -> int:
        e = self.entry
        return getattr(e, f"{role}_bank") * self.bank_bytes + getattr(e, f"{role}_offset")

    def ir_layer(self, entry: Opcode) -> None:
        raise InputError(f"{entry.opcode} runs IR layer '{entry.layer_id}': its data needs a "
                         "bundle's IR", where=f"entry {entry.id}", field="layer_id")


@dataclass
class Lowering:
    """What an opcode's lowering needs besides its own fields: the resolved PE index, the
    command label and meta, the TCM bank size and the SchedulerReservedTCM staging bytes."""

    pe: int
    label: str
    bank_bytes: int
    staging_bytes: int
    meta: dict[str, Any] = field(default_factory=dict)


_ENTRY_CONFIG = ConfigDict(
    extra="allow",  # spec §14: unknown fields of a known opcode are tolerated and kept
    strict=True,  # JSON types as written: 8 not "8", ints not booleans
    allow_inf_nan=False,
)


class Opcode(BaseModel):
    """Fields every entry has (spec §5 plus ``pe``) and the facts every opcode class sets.

    A concrete opcode class narrows ``opcode`` to a Literal, sets the class facts listed in
    the module docstring and is registered with `registry.register_opcode`."""

    model_config = _ENTRY_CONFIG

    engine: ClassVar[str] = "control"
    """Which unit executes the entry: ``dma``, ``te``, ``ve``, ``sync`` or ``control``."""
    since: ClassVar[str] = "1.1"
    """The CMDQ version that introduced the opcode."""
    timing: ClassVar[str] = "control"
    """The PE command it lowers to (see `TIMINGS`)."""
    cost_op: ClassVar[str | None] = None
    """pe_math cost-table entry that prices a ``math`` opcode."""
    math_op: ClassVar[str | None] = None
    """The data-pass math op its ``data`` description names (None: memory, gemm or none)."""
    control: ClassVar[str | None] = None
    """Control-FSM kind (``barrier``, ``nop``, ``end``) of an entry that is no PE command."""
    data: ClassVar[Any] = None
    """Data semantics: a method ``data(env) -> dict | None``, or `NO_DATA`."""
    signed_fields: ClassVar[frozenset[str]] = frozenset()
    """Integer fields that may be negative (every other integer is >= 0)."""
    chain_step: ClassVar[bool] = False
    """A one-row vector math op the compiler may chain into a VE_FUSED_TILE."""

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

    # ------------------------------------------------------------------ bytes touched

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        """TCM operands of this entry, in the order they are read then written."""
        return ()

    def dram_range(self) -> DramRange | None:
        """The HBM side of a DMA entry (None for others)."""
        return None

    @property
    def macs(self) -> int:
        """Multiply-accumulates (TE opcodes; 0 for others)."""
        return 0

    @property
    def work_elements(self) -> int:
        """Elements the entry processes (0 for sync/control)."""
        return 0

    def wait_ids(self) -> list[int]:
        """Ids this entry names as its own predecessors."""
        return list(self.deps_before)

    # ------------------------------------------------------------------ validation

    def rules(self, v: Rules) -> bool:
        """The opcode's own consistency rules (engine ids, shapes). Return False when the
        sizes are too broken to compute its TCM and HBM ranges."""
        return True

    def check_hbm(self, v: Rules) -> None:
        """The opcode's HBM rules, run after its TCM ranges were checked."""

    def cost_ops(self) -> dict[str, str]:
        """pe_math cost-table entries the simulator prices this entry by, keyed by the
        field to blame when the topology lacks one (validate checks them all)."""
        return {"opcode": self.cost_op} if self.cost_op else {}

    # ------------------------------------------------------------------ lowering

    def control_entry(self, deps: tuple[int, ...], label: str) -> ProgramEntry | None:
        """The Control-FSM entry of a control opcode (None for PE commands)."""
        if self.control is None:
            return None
        return ProgramEntry(self.id, self.control, deps=deps, label=label)

    def command(self, low: Lowering) -> PeCommand:
        """The PE command this entry lowers to (PE-command opcodes override this)."""
        raise ValueError(f"entry {self.id}: no hardware mapping for {self.opcode}")

    def unit(self, pe_id: str) -> str | None:
        """The component that does the entry's work (for stats); None for control."""
        return None

    def traffic(self, pe: int) -> tuple[int, int]:
        """(bytes fetched from TCM, bytes stored to TCM) around the engine's work."""
        return tcm_traffic(self.tcm_ranges(pe))


def tcm_traffic(ranges: Iterable[TcmRange], not_fetched: str | None = None) -> tuple[int, int]:
    """(bytes read, bytes written) of `ranges`; a range of role `not_fetched` is written
    but not fetched. One loop: a command's lowering runs this per entry."""
    rd = wr = 0
    for r in ranges:
        n = tile_bytes(r.elements, r.qbits)
        access = r.access
        if "r" in access and r.role != not_fetched:
            rd += n
        if "w" in access:
            wr += n
    return rd, wr


def engine_range(field_name: str, value: int, count: int) -> str:
    """The reason of an out-of-range ``te_id`` / ``ve_id``."""
    kind = "tensor" if field_name == "te_id" else "vector"
    return (f"{field_name} {value} is out of range: each PE has {count} {kind} engine"
            f"{'s' if count != 1 else ''} (0..{count - 1})")


def check_engine_id(v: Rules, field_name: str, value: int, count: int) -> None:
    """Report ``value`` when it is not below ``count``."""
    if value >= count:
        v.add(field_name, engine_range(field_name, value, count))


class OnVectorEngine(Opcode):
    """An opcode one of its PE's vector engines executes: ``ve_id`` picks it (checked
    against the topology), and stats attribute the work to ``pe_math{ve_id}``."""

    engine: ClassVar[str] = "ve"
    timing: ClassVar[str] = "math"

    ve_id: NonNegInt = Field(0, description="Vector engine inside the PE (0..ve_per_pe-1).")

    def rules(self, v: Rules) -> bool:
        check_engine_id(v, "ve_id", self.ve_id, v.limits.ve_per_pe)
        return True

    def unit(self, pe_id: str) -> str | None:
        return f"{pe_id}.pe_math" + (str(self.ve_id) if self.ve_id else "")


def require_math_op(entry: Opcode, op: str) -> None:
    """Refuse (one line) an entry whose data semantics name a data-pass op this kernbench
    lacks: no silent no-op, no traceback."""
    if op not in MATH_OPS:
        raise InputError(f"{entry.opcode} needs the data-pass op '{op}', which this "
                         "kernbench does not have", where=f"entry {entry.id}", field="opcode")
