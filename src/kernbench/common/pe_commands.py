"""The command contract both front ends target.

A front end (the CMDQ Control FSM, the tl KernelRunner) builds these and submits them
to a PE; PE_SCHEDULER expands each into TilePlans. Simple commands are one tile with
one engine stage (DMA) or the register round trip an engine needs (fetch → compute →
store). A CompositeCmd lists its tiles' stages explicitly (plans such as
DMA_READ → FETCH → GEMM → STORE → DMA_WRITE).

Stage parameters are plain dicts. Timing keys the engines read:
  DMA_READ / DMA_WRITE: nbytes, rows (1 = contiguous), space ("hbm" | "sram"), addr
  FETCH / STORE: nbytes
  GEMM: m, n, k, qbits_weight, qbits_activation; optional weight_stream_nbytes + addr
  MATH: op, length, rows
Anything else (addresses, dtypes, shapes) rides along for the data pass's op log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernbench.common.tile_plan import StageType

StageSpec = tuple[StageType, dict[str, Any]]


@dataclass(slots=True, eq=False)
class PeCommand:
    """Base command. `label` names it in traces and errors; `done` is set on submit."""

    label: str = ""
    done: Any = None
    data_op: bool = False  # a command type that moves or computes data says so
    meta: dict[str, Any] = field(default_factory=dict)
    submit_ns: float | None = None  # reached PE_CPU
    start_ns: float | None = None   # first engine started on it
    end_ns: float | None = None     # PE_SCHEDULER published completion

    def tiles(self) -> list[list[StageSpec]]:
        raise NotImplementedError

    def staging_bytes(self, tile: int) -> int:
        return 0

@dataclass(slots=True, eq=False)
class DmaRead(PeCommand):
    """External memory (HBM / SRAM) → TCM."""

    data_op: bool = True  # moves or computes data: logged for the data pass
    params: dict[str, Any] = field(default_factory=dict)

    def tiles(self) -> list[list[StageSpec]]:
        return [[(StageType.DMA_READ, self.params)]]


@dataclass(slots=True, eq=False)
class DmaWrite(PeCommand):
    """TCM → external memory (HBM / SRAM)."""

    data_op: bool = True  # moves or computes data: logged for the data pass
    params: dict[str, Any] = field(default_factory=dict)

    def tiles(self) -> list[list[StageSpec]]:
        return [[(StageType.DMA_WRITE, self.params)]]


@dataclass(slots=True, eq=False)
class FetchComputeStoreCmd(PeCommand):
    """One compute op on TCM operands: fetch → the `STAGE` engine → store."""

    data_op: bool = True  # computes data: logged for the data pass
    params: dict[str, Any] = field(default_factory=dict)
    fetch_nbytes: int = 0
    store_nbytes: int = 0

    def stage(self) -> StageType:
        """The engine stage between the fetch and the store."""
        raise NotImplementedError

    def tiles(self) -> list[list[StageSpec]]:
        return [[
            (StageType.FETCH, {"nbytes": self.fetch_nbytes}),
            (self.stage(), self.params),
            (StageType.STORE, {"nbytes": self.store_nbytes}),
        ]]


@dataclass(slots=True, eq=False)
class GemmCmd(FetchComputeStoreCmd):
    """One GEMM tile on TCM operands: fetch A (and B) → pe_gemm → store C."""

    def stage(self) -> StageType:
        return StageType.GEMM


@dataclass(slots=True, eq=False)
class MathCmd(FetchComputeStoreCmd):
    """One vector op on TCM operands: fetch → pe_math → store."""

    def stage(self) -> StageType:
        return StageType.MATH


@dataclass(slots=True, eq=False)
class CompositeCmd(PeCommand):
    """A tiled pipeline: every tile lists its stages; one compute opcode per command."""

    data_op: bool = True  # moves or computes data: logged for the data pass
    tile_stages: list[list[StageSpec]] = field(default_factory=list)
    tile_staging_bytes: list[int] = field(default_factory=list)

    def tiles(self) -> list[list[StageSpec]]:
        return self.tile_stages

    def staging_bytes(self, tile: int) -> int:
        return self.tile_staging_bytes[tile] if self.tile_staging_bytes else 0


def composite_gemm(
    label: str,
    *,
    m_tiles: int,
    tile_m: int,
    n: int,
    k: int,
    qbits_weight: int = 8,
    qbits_activation: int = 8,
    qbits_out: int = 32,
    src_addr: int = 0,
    dst_addr: int = 0,
    space: str = "hbm",
) -> CompositeCmd:
    """Composite GEMM: tile t = DMA_READ(A_t) → FETCH → GEMM → STORE → DMA_WRITE.

    The weight (k × n) is assumed resident in TCM; each tile streams a (tile_m × k) slice of
    A in and a (tile_m × n) slice of C out.
    """
    a_bytes = tile_m * k * qbits_activation // 8
    c_bytes = tile_m * n * qbits_out // 8
    w_bytes = k * n * qbits_weight // 8
    tiles: list[list[StageSpec]] = []
    for t in range(m_tiles):
        tiles.append([
            (StageType.DMA_READ, {"nbytes": a_bytes, "space": space,
                                  "addr": src_addr + t * a_bytes}),
            (StageType.FETCH, {"nbytes": a_bytes + w_bytes}),
            (StageType.GEMM, {"m": tile_m, "n": n, "k": k, "qbits_weight": qbits_weight,
                              "qbits_activation": qbits_activation}),
            (StageType.STORE, {"nbytes": c_bytes}),
            (StageType.DMA_WRITE, {"nbytes": c_bytes, "space": space,
                                   "addr": dst_addr + t * c_bytes}),
        ])
    return CompositeCmd(label=label, tile_stages=tiles,
                        tile_staging_bytes=[a_bytes + c_bytes] * m_tiles)
