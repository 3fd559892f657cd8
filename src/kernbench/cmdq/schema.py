"""CMDQ program model (pydantic v2), the opcode registry's view for the rest of kernbench.

The format is `spec/cmdq-format-spec.md` (v1.0) plus the additions of CMDQ 1.1 described
in `docs/cmdq.md` (new VE opcodes, optional fields). Every addition is an
optional field or a new opcode, so every 1.0 program is a valid 1.1 program.

* Each opcode is one class in `kernbench.cmdq.opcodes` carrying all its facts;
  this module re-exports them. `MODEL_BY_OPCODE` maps the opcode string to its class (live:
  it is the registry). `CmdqProgram.cmdq` is the tagged union (by ``opcode``) of every
  registered class, rebuilt when the registry changes; the JSON Schema is generated from it.
* Unknown fields of a known opcode are kept (``extra="allow"``, spec §14); unknown opcodes
  are rejected by the parser (`kernbench.cmdq.io`).
* Models check what one entry can check on its own: types (strict: no ``"8"`` for 8, no
  ``true`` for 1), non-negative integers, bit widths in {2, 4, 8, 16, 32}. Everything that
  needs the other entries or the topology (ids, dependencies, engine and PE ranges, TCM and
  HBM bounds) is `kernbench.cmdq.validate`, which runs each class's own rules.

Byte-count rules (shared by the validator and the simulator; see `entry_tcm_ranges`,
`entry_dram_range`): a tile of ``e`` elements at ``q`` bits takes ``ceil(e * q / 8)``
bytes, packed, starting at its ``*_offset`` byte inside its ``*_bank``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.opcodes import registry
from kernbench.cmdq.opcodes.base import (
    DEFAULT_OFM_QBITS,
    DEFAULT_PARAM_QBITS,
    PE_PATH_PATTERN,
    QBITS_ALLOWED,
    DramRange,
    NonNegInt,
    Opcode,
    PePath,
    PosInt,
    QBits,
    TcmRange,
    tile_bytes,
)
from kernbench.cmdq.opcodes.control import Barrier, End, Nop
from kernbench.cmdq.opcodes.dma import DmaLoadTile, DmaStoreTile, DmaTile
from kernbench.cmdq.opcodes.layer import LayerOp, TeLayerOp, VeLayerOp
from kernbench.cmdq.opcodes.registry import MODEL_BY_OPCODE, qbits_fields
from kernbench.cmdq.opcodes.te import TeConvTile, TeGemmTile, TeTile
from kernbench.cmdq.opcodes.ve import (
    VeAddTile,
    VeBinaryTile,
    VeCopyTile,
    VeGeluTile,
    VeLayernormTile,
    VeMulTile,
    VeRmsnormTile,
    VeRopeTile,
    VeSiluTile,
    VeSoftmaxTile,
    VeTile,
    VeTransposeTile,
    VeVectorTile,
)
from kernbench.cmdq.opcodes.ve_quant import (
    VeDequantizeTile,
    VeQuantizeTile,
    VeQuantTile,
    VeRequantizeTile,
    VeRowScaleTile,
)

CMDQ_VERSION = "1.1"
"""The version `kernbench` writes. It reads every 1.x version (see `supported_version`)."""

EntryBase = Opcode
"""The base of every entry model (the name this module used before the opcode classes)."""

ENTRY_MODELS: tuple[type[Opcode], ...] = tuple(MODEL_BY_OPCODE.values())
"""The built-in opcode classes, in registration order (`MODEL_BY_OPCODE` is the live set)."""
OPCODES: tuple[str, ...] = tuple(MODEL_BY_OPCODE)
"""The built-in opcode strings."""
OPCODES_1_0: frozenset[str] = frozenset(o for o, m in MODEL_BY_OPCODE.items() if m.since == "1.0")
"""The opcodes of the spec as written (v1.0)."""

# Fields whose value is a bit width (checked against QBITS_ALLOWED), over the built-ins.
QBITS_FIELDS: tuple[str, ...] = tuple(dict.fromkeys(f for m in ENTRY_MODELS
                                                    for f in qbits_fields(m)))
# Integer fields that may legitimately be negative (everything else is >= 0).
SIGNED_INT_FIELDS: frozenset[str] = frozenset().union(*(m.signed_fields for m in ENTRY_MODELS))
# Fields that list other entries' ids.
DEP_FIELDS: tuple[str, ...] = ("deps_before", "deps_after", "wait_for")


def supported_version(version: str) -> bool:
    """True for the versions this reader understands: every ``1.<minor>``."""
    major, dot, minor = version.partition(".")
    return major == "1" and dot == "." and minor.isdigit()


def entry_union() -> Any:
    """The tagged union (by ``opcode``) of every registered opcode class."""
    models = tuple(MODEL_BY_OPCODE.values())
    return Annotated[Union[models], Field(discriminator="opcode")]  # noqa: UP007


Entry = entry_union()


class CmdqMetadata(BaseModel):
    """Program metadata (spec §4). A program without metadata, or without a version, is
    read as version 1.0; programs kernbench builds default to `CMDQ_VERSION`."""

    model_config = ConfigDict(extra="allow", strict=True)

    version: str = Field(CMDQ_VERSION, description="CMDQ format version, '1.<minor>'.")
    graph_name: str | None = None
    generated_by: str | None = None
    created_at: str | None = None


class CmdqProgram(BaseModel):
    """A whole CMDQ file: the entries and the metadata. ``cmdq`` accepts every registered
    opcode (the union is rebuilt when the registry changes)."""

    model_config = ConfigDict(extra="allow", strict=True)

    cmdq: list[Entry]
    metadata: CmdqMetadata = Field(default_factory=CmdqMetadata)


def _rebuild_program_model() -> None:
    CmdqProgram.model_fields["cmdq"] = FieldInfo.from_annotation(list[entry_union()])
    CmdqProgram.model_rebuild(force=True)


registry.on_change(_rebuild_program_model)


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
    return entry.dram_range()


def entry_macs(entry: EntryBase) -> int:
    """Multiply-accumulates of a TE entry (0 for others): m*n*k for GEMM,
    n*h_out*w_out*c_out*kh*kw*c_in for conv."""
    return entry.macs


def entry_elements(entry: EntryBase) -> int:
    """Elements an entry processes: DMA num_elements, VE rows*length (rows*cols for
    transpose), TE output elements; 0 for sync/control."""
    return entry.work_elements


def entry_wait_ids(entry: EntryBase) -> list[int]:
    """Ids this entry names as its own predecessors: deps_before, plus wait_for of a BARRIER."""
    return entry.wait_ids()


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

    return json.dumps(cmdq_json_schema(), indent=2, ensure_ascii=False) + "\n"


__all__ = [
    "CMDQ_VERSION", "DEFAULT_OFM_QBITS", "DEFAULT_PARAM_QBITS", "DEP_FIELDS", "ENTRY_MODELS",
    "MODEL_BY_OPCODE", "OPCODES", "OPCODES_1_0", "PE_PATH_PATTERN", "QBITS_ALLOWED",
    "QBITS_FIELDS", "SIGNED_INT_FIELDS",
    "Barrier", "CmdqMetadata", "CmdqProgram", "DmaLoadTile", "DmaStoreTile", "DmaTile",
    "DramRange", "End", "Entry", "EntryBase", "LayerOp", "NonNegInt", "Nop", "Opcode",
    "PePath", "PosInt", "QBits", "TcmRange", "TeConvTile", "TeGemmTile", "TeLayerOp", "TeTile",
    "VeAddTile", "VeBinaryTile", "VeCopyTile", "VeDequantizeTile", "VeGeluTile",
    "VeLayerOp", "VeLayernormTile", "VeMulTile", "VeQuantTile", "VeQuantizeTile",
    "VeRequantizeTile", "VeRmsnormTile", "VeRopeTile", "VeRowScaleTile", "VeSiluTile",
    "VeSoftmaxTile", "VeTile", "VeTransposeTile", "VeVectorTile",
    "cmdq_json_schema", "cmdq_json_schema_text", "entry_dram_range", "entry_elements",
    "entry_macs", "entry_pe_index", "entry_tcm_ranges", "entry_union", "entry_wait_ids",
    "program_predecessors", "supported_version", "tile_bytes",
]
