"""DMA_GATHER_TILE (1.1): rows of an HBM table picked by indices held in TCM.

The embedding lookup of every language model (and any gather whose indices are data):
the DMA engine reads ``rows`` indices from the PE's TCM, and for each index ``i`` fetches
the ``row_bytes`` bytes of table row ``i`` (``dram_addr + i * row_bytes``) into TCM,
packed back to back. Timing: one read on the PE's DMA read channel of ``rows`` rows of
``row_bytes`` (each row rounded up to whole bursts, as a strided DMA's rows are), from
the table's cube. Data: the data pass's ``gather_rows`` on the indices (TCM) and the table
(HBM); an index outside ``[-table_rows, table_rows)`` is a data error (a negative index
counts from the end, as ONNX Gather's does).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from kernbench.cmdq.opcodes.base import (
    DataEnv,
    DramRange,
    Lowering,
    NonNegInt,
    Opcode,
    PosInt,
    Rules,
    TcmRange,
    require_math_op,
)
from kernbench.cmdq.opcodes.registry import register_opcode
from kernbench.common.pe_commands import DmaRead, PeCommand

#: bits of an index element by its dtype
INDEX_BITS = {"int32": 32, "int64": 64}


@register_opcode
class DmaGatherTile(Opcode):
    """(1.1) ``rows`` table rows of ``row_bytes`` picked by the indices at ``ids``
    (``index_dtype``) into TCM at ``spm``."""

    engine: ClassVar[str] = "dma"
    timing: ClassVar[str] = "dma"
    math_op: ClassVar[str] = "gather_rows"
    opcode: Literal["DMA_GATHER_TILE"] = "DMA_GATHER_TILE"

    tensor_role: Literal["weight", "activation", "kv"] = Field(
        "weight", description="What the table holds.")
    dram_addr: NonNegInt = Field(description="HBM physical byte address of table row 0.")
    table_rows: PosInt = Field(description="Rows of the table (indices are bounds-checked).")
    row_bytes: PosInt = Field(description="Bytes of one table row (and of one gathered row).")
    rows: PosInt = Field(description="Indices, and rows gathered.")
    index_dtype: Literal["int32", "int64"] = Field("int64", description="Index element type.")
    ids_bank: NonNegInt = Field(description="TCM bank of the indices.")
    ids_offset: NonNegInt
    spm_bank: NonNegInt = Field(description="TCM bank the rows are gathered into.")
    spm_offset: NonNegInt

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        return (
            TcmRange("ids", pe, self.ids_bank, self.ids_offset, self.rows,
                     INDEX_BITS[self.index_dtype], "r"),
            TcmRange("spm", pe, self.spm_bank, self.spm_offset, self.rows * self.row_bytes, 8,
                     "w"),
        )

    @property
    def nbytes(self) -> int:
        """Bytes moved: ``rows * row_bytes``."""
        return self.rows * self.row_bytes

    @property
    def work_elements(self) -> int:
        return self.rows * self.row_bytes

    def dram_range(self) -> DramRange:
        """The table: any of its rows may be read."""
        return DramRange(self.dram_addr, self.table_rows, self.row_bytes, self.row_bytes, False)

    def check_hbm(self, v: Rules) -> None:
        """The table lies inside the HBM."""
        r = self.dram_range()
        if r.end > v.limits.hbm_bytes:
            v.add("dram_addr", f"table of {r.rows} rows of {r.row_bytes} bytes at address "
                  f"{r.addr} ends at {r.end}, beyond the {v.limits.hbm_bytes}-byte HBM")

    def unit(self, pe_id: str) -> str | None:
        return f"{pe_id}.pe_dma"

    def command(self, low: Lowering) -> PeCommand:
        """One DMA read of ``rows`` rows of ``row_bytes`` (per-row bursts)."""
        params = {"nbytes": self.nbytes, "rows": self.rows, "space": "hbm",
                  "addr": self.dram_addr,
                  "tcm_addr": self.spm_bank * low.bank_bytes + self.spm_offset, "entry": self.id}
        return DmaRead(label=low.label, params=params, meta=low.meta)

    def data(self, env: DataEnv) -> dict[str, Any]:
        """Math op ``gather_rows``: indices from TCM, the table from HBM, rows to TCM."""
        require_math_op(self, "gather_rows")
        return {"op_kind": "math", "op_name": "dma_gather_tile", "op": "gather_rows",
                "space": env.space, "input_addrs": [env.addr("ids"), self.dram_addr],
                "input_spaces": [env.space, "hbm"],
                "input_shapes": [[self.rows], [self.table_rows, self.row_bytes]],
                "input_dtypes": [self.index_dtype, "uint8"], "dst_addr": env.addr("spm"),
                "shape_out": [self.rows, self.row_bytes], "dtype": "uint8"}
