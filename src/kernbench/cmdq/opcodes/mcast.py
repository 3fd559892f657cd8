"""DMA_MCAST_TILE (1.1): bytes of the PE's TCM copied into the TCM of a list of PEs.

The multicast of a mesh of cores with local memories: a sender core pushes a
block it holds (e.g. a GEMM operand block it read from DRAM) to the other cores of its
row or column, at the same bank and offset in each destination's TCM. Timing: one
transfer on the sender's DMA write channel, pipelined through the sender's TCM port, its
link to its router, the union of the XY routes to every destination (a link shared by
several routes carries the bytes once, as a multicast tree does), then each
destination's ejection link and TCM port. Data: the bytes of ``spm`` are written to
``dst`` in every destination's TCM (a destination may be the sender itself only at a
range that does not overlap the source).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from kernbench.cmdq.opcodes.base import (
    DataEnv,
    Lowering,
    NonNegInt,
    Opcode,
    PosInt,
    QBits,
    Rules,
    TcmRange,
    tile_bytes,
)
from kernbench.cmdq.opcodes.registry import register_opcode
from kernbench.common.pe_commands import DmaWrite, PeCommand


@register_opcode
class DmaMcastTile(Opcode):
    """(1.1) ``num_elements`` at ``qbits`` from ``spm`` of the entry's PE to ``dst`` of
    every PE of ``dst_pes`` (indices)."""

    engine: ClassVar[str] = "dma"
    timing: ClassVar[str] = "dma"
    opcode: Literal["DMA_MCAST_TILE"] = "DMA_MCAST_TILE"

    qbits: QBits = Field(description="Bit width of one element (bytes = ceil(n·qbits/8)).")
    num_elements: PosInt = Field(description="Elements copied.")
    spm_bank: NonNegInt = Field(description="TCM bank of the source, in the entry's PE.")
    spm_offset: NonNegInt = Field(description="Byte offset of the source inside its bank.")
    dst_pes: list[NonNegInt] = Field(
        min_length=1, description="Destination PEs by index (0..num_pes-1), distinct.")
    dst_bank: NonNegInt = Field(description="TCM bank of the copy in every destination.")
    dst_offset: NonNegInt = Field(description="Byte offset of the copy inside that bank.")

    @property
    def nbytes(self) -> int:
        """Bytes copied to each destination: ``ceil(num_elements * qbits / 8)``."""
        return tile_bytes(self.num_elements, self.qbits)

    @property
    def work_elements(self) -> int:
        return self.num_elements

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        """The source on the entry's PE, then the copy on every destination."""
        src = TcmRange("spm", pe, self.spm_bank, self.spm_offset, self.num_elements,
                       self.qbits, "r")
        return (src, *(TcmRange("dst", d, self.dst_bank, self.dst_offset, self.num_elements,
                                self.qbits, "w") for d in self.dst_pes))

    def traffic(self, pe: int) -> tuple[int, int]:
        """(bytes read from the source TCM, bytes written into destination TCMs)."""
        return self.nbytes, self.nbytes * len(self.dst_pes)

    def rules(self, v: Rules) -> bool:
        """Destinations exist and are distinct; a destination that is the sender does not
        receive the copy over its own source bytes."""
        n = v.limits.num_pes
        bad = [d for d in self.dst_pes if d >= n]
        if bad:
            v.add("dst_pes", f"PE {bad[0]} is out of range: the topology has {n} PEs "
                  f"(0..{n - 1})")
            return False
        if len(set(self.dst_pes)) != len(self.dst_pes):
            dup = next(d for d in self.dst_pes if self.dst_pes.count(d) > 1)
            v.add("dst_pes", f"PE {dup} is named twice")
        try:
            own = v.limits.pe_index(self.pe)
        except ValueError:
            return True  # the entry's pe is reported by the validator
        if own in self.dst_pes and self.dst_bank == self.spm_bank and \
                self.dst_offset < self.spm_offset + self.nbytes and \
                self.spm_offset < self.dst_offset + self.nbytes:
            v.add("dst_offset", f"the copy into the sender (PE {own}) overlaps its source "
                  f"bytes {self.spm_offset}..{self.spm_offset + self.nbytes} of bank "
                  f"{self.spm_bank}")
        return True

    def unit(self, pe_id: str) -> str | None:
        return f"{pe_id}.pe_dma"

    def command(self, low: Lowering) -> PeCommand:
        """One transfer on the DMA write channel to the destinations' TCMs."""
        params = {"nbytes": self.nbytes, "rows": 1, "space": "tcm",
                  "dst_pes": list(self.dst_pes),
                  "tcm_addr": self.spm_bank * low.bank_bytes + self.spm_offset,
                  "addr": self.dst_bank * low.bank_bytes + self.dst_offset, "entry": self.id}
        return DmaWrite(label=low.label, params=params, meta=low.meta)

    def data(self, env: DataEnv) -> dict[str, Any]:
        """Memory ``mcast``: the source bytes written to every destination's TCM."""
        dst_addr = self.dst_bank * env.bank_bytes + self.dst_offset
        return {"op_kind": "memory", "op_name": "mcast", "src_space": env.space,
                "src_addr": env.addr("spm"), "nbytes": self.nbytes,
                "dst_spaces": [env.space_of(d) for d in self.dst_pes], "dst_addr": dst_addr}
