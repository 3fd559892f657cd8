"""The hardware limits a CMDQ program is validated against.

`CmdqLimits` is the small, topology-independent summary the validator needs: how many PEs
there are and what they are called, how many tensor / vector engines each PE has, the TCM
geometry of one PE (the AllocatableTCM a program may address), the HBM size and the pe_math
cost table's ops. `CmdqLimits.for_topology(topology)` derives it from a topology;
`default_small()` is that of the `small` preset (derived, never copied: a test checks it
against the preset's YAML).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from kernbench.config.schema import DEFAULT_MATH_OP_CYCLES
from kernbench.topology import load_topology
from kernbench.topology.model import Topology

GIB = 1024**3
KIB = 1024


@dataclass(frozen=True, slots=True)
class CmdqLimits:
    """Ranges a CMDQ entry must stay within.

    * ``num_pes`` / ``pe_paths``: the PEs an entry's ``pe`` may name, by index
      (0..num_pes-1) or by dotted path (``pe_paths[i]`` is PE i, e.g. ``"sip0.cube0.pe3"``).
      A unique dotted suffix of a path (``"pe3"``, ``"cube0.pe3"``) names that PE too.
    * ``te_per_pe`` / ``ve_per_pe``: ``te_id`` / ``ve_id`` range inside one PE.
    * ``tcm_banks`` x ``tcm_bank_bytes``: one PE's TCM (``spm_bank`` / ``*_bank`` fields
      index the banks; a range must fit inside its bank).
    * ``hbm_bytes``: the HBM physical address space ``dram_addr`` lives in.
    * ``math_ops``: the ops pe_math has a cost for (VE opcodes and VE_LAYER_OP ``op`` must
      name one: the simulator prices them by it).
    """

    num_pes: int
    pe_paths: tuple[str, ...]
    te_per_pe: int
    ve_per_pe: int
    tcm_banks: int
    tcm_bank_bytes: int
    hbm_bytes: int
    math_ops: frozenset[str] = frozenset(DEFAULT_MATH_OP_CYCLES)
    _pe_lookup: dict[str, int] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        for name in ("num_pes", "te_per_pe", "ve_per_pe", "tcm_banks", "tcm_bank_bytes",
                     "hbm_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"CmdqLimits.{name} must be a positive integer, got {value!r}")
        object.__setattr__(self, "math_ops", frozenset(self.math_ops))
        paths = tuple(self.pe_paths)
        object.__setattr__(self, "pe_paths", paths)
        if len(paths) != self.num_pes:
            raise ValueError(
                f"CmdqLimits.pe_paths has {len(paths)} paths but num_pes is {self.num_pes}"
            )
        if len(set(paths)) != len(paths):
            raise ValueError("CmdqLimits.pe_paths has duplicate paths")
        # Every dotted suffix of a path names that PE, unless two PEs share the suffix.
        lookup: dict[str, int] = {}
        ambiguous: set[str] = set()
        for index, path in enumerate(paths):
            parts = path.split(".")
            for start in range(len(parts)):
                key = ".".join(parts[start:])
                if key in lookup and lookup[key] != index:
                    ambiguous.add(key)
                lookup.setdefault(key, index)
        for key in ambiguous:
            del lookup[key]
        for index, path in enumerate(paths):  # a full path always wins
            lookup[path] = index
        object.__setattr__(self, "_pe_lookup", lookup)

    @property
    def tcm_bytes(self) -> int:
        """Bytes of one PE's TCM."""
        return self.tcm_banks * self.tcm_bank_bytes

    @classmethod
    def for_topology(cls, topology: Topology) -> CmdqLimits:
        """What a CMDQ program may address on ``topology``: PEs, engines, allocatable TCM,
        HBM, pe_math cost ops.

        CMDQ banks address the AllocatableTCM only: the
        SchedulerReservedTCM banks at the top of the TCM are not visible to programs.
        """
        pt = topology.config.cube.pe_template
        tcm = pt.pe_tcm
        bank_bytes = tcm.capacity_kib * KIB // tcm.banks
        return cls(
            num_pes=len(topology.pes),
            pe_paths=tuple(p.id for p in topology.pes),
            te_per_pe=pt.pe_gemm.count,
            ve_per_pe=pt.pe_math.count,
            tcm_banks=(tcm.capacity_kib - tcm.reserved_kib) * KIB // bank_bytes,
            tcm_bank_bytes=bank_bytes,
            hbm_bytes=topology.hbm_bytes,
            math_ops=frozenset(pt.pe_math.op_cycles),
        )

    @classmethod
    def default_small(cls) -> CmdqLimits:
        """The limits of the `small` preset (config/presets/small.yaml), derived from it."""
        return _preset_limits("small")

    def pe_index(self, pe: int | str | None) -> int:
        """The PE index an entry's ``pe`` field names (None: the first PE, 0).

        Raises ValueError with a one-line reason when ``pe`` names no PE of this topology.
        """
        if pe is None:
            return 0
        if isinstance(pe, bool) or not isinstance(pe, int | str):
            raise ValueError(f"must be a PE index or a dotted PE path, got {pe!r}")
        if isinstance(pe, int):
            if 0 <= pe < self.num_pes:
                return pe
            raise ValueError(
                f"PE index {pe} is out of range: this topology has {self.num_pes} PEs "
                f"(0..{self.num_pes - 1})"
            )
        index = self._pe_lookup.get(pe)
        if index is None:
            shown = ", ".join(repr(p) for p in self.pe_paths[:4])
            more = f", ... ({self.num_pes} in all)" if self.num_pes > 4 else ""
            raise ValueError(f"no PE named {pe!r} in this topology (PEs: {shown}{more})")
        return index


@functools.cache
def _preset_limits(name: str) -> CmdqLimits:
    return CmdqLimits.for_topology(load_topology(name))
