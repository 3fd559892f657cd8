"""DMA opcodes: DMA_LOAD_TILE (HBM → TCM) and DMA_STORE_TILE (TCM → HBM), spec §7."""

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
    QBits,
    Rules,
    TcmRange,
    tile_bytes,
)
from kernbench.cmdq.opcodes.registry import register_opcode
from kernbench.common.pe_commands import DmaRead, DmaWrite, PeCommand
from kernbench.numerics.block_float import BLOCK, block_bytes


class DmaTile(Opcode):
    """A tile between HBM and the target PE's TCM; 2-D when ``stride_bytes`` and ``rows``
    say so (rows of contiguous bytes in HBM, packed back to back in TCM).

    Lowering: DmaRead / DmaWrite on the PE's pe_dma (bytes from num_elements × qbits, or
    the block-float bytes of a ``block_float`` load).
    Data: memory ``dma`` between ``hbm`` and the PE's TCM (2-D when strided); a
    ``block_float`` load is memory ``dma_unpack`` (decoded into bf16)."""

    engine: ClassVar[str] = "dma"
    since: ClassVar[str] = "1.0"
    timing: ClassVar[str] = "dma"
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
    qbits_kv: QBits | None = Field(
        None,
        description="(spec §11) The KV-cache width of a tensor_role 'kv' tile; when given it "
        "must equal qbits, the width the bytes are counted at.",
    )
    block_float: Literal["bfp8_b", "bfp4_b"] | None = Field(
        None,
        description="(1.1, DMA_LOAD_TILE) The HBM side holds this block float "
        "(numerics.block_float: blocks of 16 elements, each an exponent byte and its "
        "codes; 17 or 9 bytes a block): the bytes moved are those blocks', and the TCM "
        "receives the values as bf16 (qbits 16). num_elements (a row's, when strided) "
        "is whole blocks.",
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
        """Bytes moved over HBM: ``ceil(num_elements * qbits / 8)``, or the blocks of a
        ``block_float`` load."""
        return self._hbm_bytes(self.num_elements)

    def _hbm_bytes(self, elements: int) -> int:
        if self.block_float is not None:
            return elements // BLOCK * block_bytes(self.block_float)
        return tile_bytes(elements, self.qbits)

    @property
    def work_elements(self) -> int:
        return self.num_elements

    def dram_range(self) -> DramRange:
        if not self.strided:
            n = self.nbytes
            return DramRange(self.dram_addr, 1, n, n, self._write_dram)
        row_bytes = self._hbm_bytes(self.num_elements // self.rows)
        assert self.stride_bytes is not None
        return DramRange(self.dram_addr, self.rows, row_bytes, self.stride_bytes,
                         self._write_dram)

    # ------------------------------------------------------------------ validation

    def rules(self, v: Rules) -> bool:
        """A KV width only on a KV tile and equal to qbits; a stride needs rows; rows split
        num_elements evenly into whole bytes."""
        if self.qbits_kv is not None and self.tensor_role != "kv":
            v.add("qbits_kv", f"qbits_kv is given on a tensor_role '{self.tensor_role}' tile; "
                  "only a 'kv' tile carries it (spec §11)")
        elif self.qbits_kv is not None and self.qbits_kv != self.qbits:
            v.add("qbits_kv", f"qbits_kv {self.qbits_kv} differs from qbits {self.qbits}: the "
                  "tile moves num_elements × qbits bits; give the KV width in both")
        if self.block_float is not None and not self._block_float_ok(v):
            return False
        if self.stride_bytes and self.rows == 1:
            v.add("rows", f"stride_bytes {self.stride_bytes} is given but rows is 1: a strided "
                  "transfer needs rows > 1 (or stride_bytes null/0 for a contiguous one)")
            return True
        if not self.strided:
            return True
        if self.num_elements % self.rows:
            v.add("rows", f"num_elements {self.num_elements} does not split into "
                  f"{self.rows} equal rows")
            return False
        if (self.num_elements // self.rows * self.qbits) % 8:
            per_row = self.num_elements // self.rows
            v.add("rows", f"a row of {per_row} element{'s' if per_row > 1 else ''}"
                  f" at {self.qbits} bits is not a whole number of bytes")
            return False
        return True

    def _block_float_ok(self, v: Rules) -> bool:
        """A block-float load: into bf16 (qbits 16), of whole blocks per row."""
        if self._write_dram:
            v.add("block_float", "a block-float tile is loaded (HBM → TCM, decoded to bf16); "
                  "a store does not encode one")
            return False
        if self.qbits != 16:
            v.add("qbits", f"a block_float load writes bf16 into the TCM: qbits must be 16, "
                  f"not {self.qbits}")
            return False
        per_row = self.num_elements // (self.rows if self.strided else 1)
        if per_row % BLOCK or self.strided and self.num_elements % self.rows:
            v.add("num_elements", f"{per_row} elements a row are not whole {self.block_float} "
                  f"blocks of {BLOCK}")
            return False
        return True

    def check_hbm(self, v: Rules) -> None:
        """Rows do not overlap and the HBM range lies inside the HBM."""
        r = self.dram_range()
        hbm = v.limits.hbm_bytes
        if self.strided and r.stride_bytes < r.row_bytes:
            v.add("stride_bytes", f"stride of {r.stride_bytes} bytes is shorter than "
                  f"a row ({r.row_bytes} bytes): rows would overlap")
            return
        if r.end > hbm:
            shape = (f"{r.rows} rows of {r.row_bytes} bytes every {r.stride_bytes} bytes"
                     if r.rows > 1 else f"{r.nbytes} bytes")
            v.add("dram_addr", f"HBM range of {shape} at address {r.addr} ends at "
                  f"{r.end}, beyond the {hbm}-byte HBM")

    # ------------------------------------------------------------------ lowering

    def unit(self, pe_id: str) -> str | None:
        return f"{pe_id}.pe_dma"

    def command(self, low: Lowering) -> PeCommand:
        dr = self.dram_range()
        params = {"nbytes": dr.nbytes, "rows": dr.rows, "space": "hbm", "addr": self.dram_addr,
                  "tcm_addr": self.spm_bank * low.bank_bytes + self.spm_offset,
                  "entry": self.id}
        return (DmaWrite if dr.write else DmaRead)(label=low.label, params=params,
                                                   meta=low.meta)

    def data(self, env: DataEnv) -> dict[str, Any]:
        """Memory ``dma`` between HBM and TCM (2-D when strided)."""
        tcm_space, tcm_addr = env.space, env.addr("spm")
        dr = self.dram_range()
        d: dict[str, Any] = {"op_kind": "memory", "op_name": "dma"}
        if self.block_float is not None:  # decoded into bf16 rows packed in the TCM
            d.update(op_name="dma_unpack", fmt=self.block_float,
                     row_elems=self.num_elements // dr.rows)
        if dr.write:
            d.update(src_space=tcm_space, src_addr=tcm_addr, dst_space="hbm", dst_addr=dr.addr)
        else:
            d.update(src_space="hbm", src_addr=dr.addr, dst_space=tcm_space, dst_addr=tcm_addr)
        d["nbytes"] = dr.nbytes
        if dr.rows > 1:
            hbm_stride, tcm_stride = dr.stride_bytes, dr.row_bytes
            d.update(rows=dr.rows, row_bytes=dr.row_bytes,
                     src_stride=tcm_stride if dr.write else hbm_stride,
                     dst_stride=hbm_stride if dr.write else tcm_stride)
        if self.block_float is not None:  # the TCM rows are bf16, packed
            d["dst_stride"] = d["row_elems"] * 2
        return d


@register_opcode
class DmaLoadTile(DmaTile):
    """HBM → TCM (spec §7.1)."""

    opcode: Literal["DMA_LOAD_TILE"] = "DMA_LOAD_TILE"


@register_opcode
class DmaStoreTile(DmaTile):
    """TCM → HBM (spec §7.2)."""

    _write_dram: ClassVar[bool] = True
    opcode: Literal["DMA_STORE_TILE"] = "DMA_STORE_TILE"
