"""Whole-layer opcodes (1.1): VE_LAYER_OP and TE_LAYER_OP, the compiler's fallback for
layers it does not tile.

Lowering: a composite command streamed through SchedulerReservedTCM:
chunks of input in, the engine's share of the work, chunks of output out. Data: the IR
layer's reference kernel, attached by the host from the bundle's IR (`DataEnv.ir_layer`).
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
    check_engine_id,
)
from kernbench.cmdq.opcodes.registry import register_opcode
from kernbench.common.pe_commands import CompositeCmd, PeCommand
from kernbench.common.tile_plan import StageType


class LayerOp(Opcode):
    """(1.1) One whole IR layer (`layer_id`) on one PE, streamed HBM → TCM → HBM through the
    scheduler's staging buffers: the compiler's fallback for layers it does not tile.
    Its data semantics are the IR op's (docs/compiler.md)."""

    timing: ClassVar[str] = "composite"
    math_op: ClassVar[str] = "ir_layer"

    layer_id: str = Field(description="IR layer to execute.")  # type: ignore[assignment]
    in_bytes: NonNegInt = Field(description="Bytes read from HBM.")
    out_bytes: NonNegInt = Field(description="Bytes written to HBM.")
    dram_addr: NonNegInt = Field(0, description="HBM address the stream starts at (routing).")

    def check_hbm(self, v: Rules) -> None:
        """Both streams lie inside the HBM."""
        hbm = v.limits.hbm_bytes
        for name in ("in_bytes", "out_bytes"):
            n = getattr(self, name)
            if self.dram_addr + n > hbm:
                v.add(name, f"{n} bytes from address {self.dram_addr} run past the "
                      f"{hbm}-byte HBM")

    def compute_stage(self, t: int, tiles: int) -> tuple[StageType, dict[str, Any]]:
        """The engine's share of tile ``t`` of ``tiles``."""
        raise NotImplementedError

    def command(self, low: Lowering) -> PeCommand:
        staging = low.staging_bytes
        chunk = max(1, staging // 2)
        tiles = max(1, -(-max(self.in_bytes, self.out_bytes) // chunk))
        stages = []
        for t in range(tiles):
            i0, i1 = self.in_bytes * t // tiles, self.in_bytes * (t + 1) // tiles
            o0, o1 = self.out_bytes * t // tiles, self.out_bytes * (t + 1) // tiles
            tile = []
            if i1 > i0:
                tile += [(StageType.DMA_READ, {"nbytes": i1 - i0, "space": "hbm",
                                               "addr": self.dram_addr + i0}),
                         (StageType.FETCH, {"nbytes": i1 - i0})]
            tile.append(self.compute_stage(t, tiles))
            if o1 > o0:
                tile += [(StageType.STORE, {"nbytes": o1 - o0}),
                         (StageType.DMA_WRITE, {"nbytes": o1 - o0, "space": "hbm",
                                                "addr": self.dram_addr + o0})]
            stages.append(tile)
        per_tile = min(staging, -(-(self.in_bytes + self.out_bytes) // tiles))
        return CompositeCmd(label=low.label, meta=low.meta, tile_stages=stages,
                            tile_staging_bytes=[per_tile] * tiles)

    def data(self, env: DataEnv) -> None:
        """The IR layer's reference kernel, attached by the host (it needs the IR)."""
        env.ir_layer(self)


@register_opcode
class VeLayerOp(LayerOp):
    engine: ClassVar[str] = "ve"
    opcode: Literal["VE_LAYER_OP"] = "VE_LAYER_OP"
    ve_id: NonNegInt = 0
    elements: PosInt = Field(description="Elements computed (vector-engine cost).")
    op: str = Field("copy", description="pe_math cost-table entry that prices the layer.")

    def rules(self, v: Rules) -> bool:
        check_engine_id(v, "ve_id", self.ve_id, v.limits.ve_per_pe)
        return True

    def cost_ops(self) -> dict[str, str]:
        return {"op": self.op or "copy"}

    def unit(self, pe_id: str) -> str | None:
        return f"{pe_id}.pe_math"

    def compute_stage(self, t: int, tiles: int) -> tuple[StageType, dict[str, Any]]:
        n_el = max(1, self.elements * (t + 1) // tiles - self.elements * t // tiles)
        return (StageType.MATH, {"op": self.op if self.op else "copy", "length": n_el,
                                 "rows": 1, "ve_id": self.ve_id})


@register_opcode
class TeLayerOp(LayerOp):
    engine: ClassVar[str] = "te"
    opcode: Literal["TE_LAYER_OP"] = "TE_LAYER_OP"
    te_id: NonNegInt = 0
    m: PosInt
    n: PosInt
    k: PosInt
    qbits_weight: QBits = 8
    qbits_activation: QBits = 8

    def rules(self, v: Rules) -> bool:
        check_engine_id(v, "te_id", self.te_id, v.limits.te_per_pe)
        return True

    def unit(self, pe_id: str) -> str | None:
        return f"{pe_id}.pe_gemm"

    def compute_stage(self, t: int, tiles: int) -> tuple[StageType, dict[str, Any]]:
        m = max(1, self.m * (t + 1) // tiles - self.m * t // tiles)
        return (StageType.GEMM, {"m": m, "n": self.n, "k": self.k, "te_id": self.te_id,
                                 "qbits_weight": self.qbits_weight,
                                 "qbits_activation": self.qbits_activation})
