"""CMDQ meets the hardware: limits from a topology, entries → Control-FSM program entries.

Each CMDQ entry becomes one `ProgramEntry` for the cube's M_CPU:
- DMA_LOAD_TILE / DMA_STORE_TILE → DmaRead / DmaWrite on the target PE's pe_dma; bytes
  from num_elements × qbits; `stride_bytes` with `rows` > 1 makes it 2-D (rows of
  contiguous bytes, each rounded up to whole bursts).
- TE_GEMM_TILE → GemmCmd: fetch ifm + wgt (+ bias, + ofm when accumulating), pe_gemm on
  (m, n, k), store ofm. TE_CONV_TILE runs as its implicit GEMM
  (M = n·h_out·w_out, N = c_out, K = kh·kw·c_in).
- VE_*_TILE → MathCmd: fetch the inputs, pe_math op on rows × length, store the output.
- BARRIER / NOP / END keep their Control-FSM meaning.
"""

from __future__ import annotations

from typing import Any

from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.schema import (
    CmdqProgram,
    DmaTile,
    EntryBase,
    LayerOp,
    TeConvTile,
    TeGemmTile,
    TeLayerOp,
    VeLayerOp,
    VeTile,
    program_predecessors,
)
from kernbench.common.pe_commands import CompositeCmd, DmaRead, DmaWrite, GemmCmd, MathCmd
from kernbench.common.program import ProgramEntry
from kernbench.common.tile_plan import StageType
from kernbench.topology.model import Topology

VE_OP = {
    "VE_LAYERNORM_TILE": "layernorm", "VE_SOFTMAX_TILE": "softmax", "VE_RMSNORM_TILE": "rmsnorm",
    "VE_GELU_TILE": "gelu", "VE_SILU_TILE": "silu", "VE_ADD_TILE": "add", "VE_MUL_TILE": "mul",
    "VE_ROPE_TILE": "rope", "VE_COPY_TILE": "copy", "VE_TRANSPOSE_TILE": "transpose",
    "VE_QUANTIZE_TILE": "quantize", "VE_REQUANTIZE_TILE": "requantize",
    "VE_DEQUANTIZE_TILE": "dequantize", "VE_ROWSCALE_TILE": "reduce_max",
}


def limits_for(topology: Topology) -> CmdqLimits:
    """What a CMDQ program may address on `topology`: PEs, engines, allocatable TCM, HBM.

    CMDQ banks address the AllocatableTCM only (ADR-0014 D5.1): the SchedulerReservedTCM
    banks at the top of the TCM are not visible to programs.
    """
    pt = topology.config.cube.pe_template
    tcm = pt.pe_tcm
    bank_bytes = tcm.capacity_kib * 1024 // tcm.banks
    return CmdqLimits(
        num_pes=len(topology.pes),
        pe_paths=tuple(p.id for p in topology.pes),
        te_per_pe=pt.pe_gemm.count,
        ve_per_pe=pt.pe_math.count,
        tcm_banks=(tcm.capacity_kib - tcm.reserved_kib) * 1024 // bank_bytes,
        tcm_bank_bytes=bank_bytes,
        hbm_bytes=topology.hbm_bytes,
    )


def engine_of(entry: EntryBase, pe_id: str) -> str | None:
    """The component that does the entry's work (for stats)."""
    if isinstance(entry, TeLayerOp):
        return f"{pe_id}.pe_gemm"
    if isinstance(entry, VeLayerOp):
        return f"{pe_id}.pe_math"
    if isinstance(entry, DmaTile):
        return f"{pe_id}.pe_dma"
    if isinstance(entry, TeGemmTile | TeConvTile):
        te = entry.te_id
        return f"{pe_id}.pe_gemm" + (str(te) if te else "")
    if isinstance(entry, VeTile):
        ve = entry.ve_id
        return f"{pe_id}.pe_math" + (str(ve) if ve else "")
    return None


def to_program(program: CmdqProgram, topology: Topology,
               limits: CmdqLimits | None = None, data: Any = None) -> list[ProgramEntry]:
    """Translate a validated program into Control-FSM entries.

    With `data` (a cmdq.bundle.DataContext), every command also carries its `"data"`
    description for the op log (cmdq/data.py)."""
    limits = limits or limits_for(topology)
    bank = limits.tcm_bank_bytes
    staging_bytes = topology.config.cube.pe_template.pe_tcm.reserved_kib * 1024
    preds = program_predecessors(program)  # deps_before ∪ wait_for ∪ reversed deps_after
    out: list[ProgramEntry] = []
    for e in program.cmdq:
        deps = tuple(preds[e.id])
        label = f"#{e.id} {e.opcode}"
        op = e.opcode
        if op == "BARRIER":
            out.append(ProgramEntry(e.id, "barrier", deps=(), wait_for=deps, label=label))
            continue
        if op == "NOP":
            out.append(ProgramEntry(e.id, "nop", deps=deps, label=label))
            continue
        if op == "END":
            out.append(ProgramEntry(e.id, "end", deps=deps, label=label))
            continue
        pe = limits.pe_index(e.pe)
        ranges = e.tcm_ranges(pe)
        # an accumulating GEMM keeps its partial sums in the array's accumulators: the ofm
        # is written back, not fetched again
        rd = sum(r.nbytes for r in ranges if "r" in r.access and not (
            r.role == "ofm" and isinstance(e, TeGemmTile | TeConvTile)))
        wr = sum(r.nbytes for r in ranges if "w" in r.access)
        meta = {"entry_id": e.id, "layer_id": e.layer_id}
        if isinstance(e, DmaTile):
            dr = e.dram_range()
            params = {"nbytes": dr.nbytes, "rows": dr.rows, "space": "hbm", "addr": e.dram_addr,
                      "tcm_addr": e.spm_bank * bank + e.spm_offset, "entry": e.id}
            cmd = (DmaWrite if dr.write else DmaRead)(label=label, params=params, meta=meta)
        elif isinstance(e, TeGemmTile | TeConvTile):
            if isinstance(e, TeConvTile):
                h_out, w_out = e.out_hw
                m, n, k = e.n * h_out * w_out, e.c_out, e.kh * e.kw * e.c_in
            else:
                m, n, k = e.m, e.n, e.k
            params = {"m": m, "n": n, "k": k, "qbits_weight": e.qbits_weight,
                      "qbits_activation": e.qbits_activation, "te_id": e.te_id, "entry": e.id}
            cmd = GemmCmd(label=label, params=params, fetch_nbytes=rd, store_nbytes=wr, meta=meta)
        elif isinstance(e, VeTile):
            params = {"op": VE_OP[op], "length": e.length, "rows": e.rows, "ve_id": e.ve_id,
                      "entry": e.id}
            cmd = MathCmd(label=label, params=params, fetch_nbytes=rd, store_nbytes=wr, meta=meta)
        elif isinstance(e, LayerOp):
            cmd = layer_op_command(e, label, meta, staging_bytes)
        else:  # a known opcode without a hardware mapping (validated programs never get here)
            raise ValueError(f"entry {e.id}: no hardware mapping for {op}")
        if data is not None:
            data.attach(e, cmd, topology.pes[pe].id, bank)
        out.append(ProgramEntry(e.id, "command", pe=pe, command=cmd, deps=deps, label=label))
    return out


def layer_op_command(e: LayerOp, label: str, meta: dict, staging_bytes: int) -> CompositeCmd:
    """A whole layer streamed through SchedulerReservedTCM: chunks of input in, the
    engine's share of the work, chunks of output out (ADR-0014 D3.2 composite)."""
    chunk = max(1, staging_bytes // 2)
    tiles = max(1, -(-max(e.in_bytes, e.out_bytes) // chunk))
    stages = []
    for t in range(tiles):
        i0, i1 = e.in_bytes * t // tiles, e.in_bytes * (t + 1) // tiles
        o0, o1 = e.out_bytes * t // tiles, e.out_bytes * (t + 1) // tiles
        if isinstance(e, TeLayerOp):
            m = max(1, e.m * (t + 1) // tiles - e.m * t // tiles)
            compute = (StageType.GEMM, {"m": m, "n": e.n, "k": e.k, "te_id": e.te_id,
                                        "qbits_weight": e.qbits_weight,
                                        "qbits_activation": e.qbits_activation})
        else:
            n_el = max(1, e.elements * (t + 1) // tiles - e.elements * t // tiles)
            compute = (StageType.MATH, {"op": e.op if e.op else "copy", "length": n_el,
                                        "rows": 1, "ve_id": e.ve_id})
        tile = []
        if i1 > i0:
            tile += [(StageType.DMA_READ, {"nbytes": i1 - i0, "space": "hbm",
                                           "addr": e.dram_addr + i0}),
                     (StageType.FETCH, {"nbytes": i1 - i0})]
        tile.append(compute)
        if o1 > o0:
            tile += [(StageType.STORE, {"nbytes": o1 - o0}),
                     (StageType.DMA_WRITE, {"nbytes": o1 - o0, "space": "hbm",
                                            "addr": e.dram_addr + o0})]
        stages.append(tile)
    return CompositeCmd(label=label, meta=meta, tile_stages=stages,
                        tile_staging_bytes=[min(staging_bytes, -(-(e.in_bytes + e.out_bytes)
                                                                 // tiles))] * tiles)
