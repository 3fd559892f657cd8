"""Peak figures of a topology: dense compute by precision, HBM bandwidth and capacity.

These are the same peaks the compiler's roofline divides by (compiler/roofline.py):
compute = PEs × array rows × cols × throughput_factor[bits] × clock, counted as 2 ops
per MAC (the way vendors quote TOPS); HBM bandwidth = cubes × channels × channel
bandwidth. The CLI prints them (`kernbench topology show`) and the LLM summary uses them
for its roofline check.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernbench.topology.model import Topology

#: precision label → operand bits looked up in pe_gemm.throughput_factor
PRECISIONS = (("int4", 4), ("int8", 8), ("fp16/bf16", 16), ("fp32", 32))


@dataclass(frozen=True)
class PeakFigures:
    """Dense peaks of the whole system (all SIPs, cubes and PEs)."""

    tops: dict[str, float]       # precision label → tera-ops/s (2 ops per MAC)
    macs_per_ns: dict[int, float]  # operand bits → MACs per ns
    vector_gelem_s: float        # SIMD elements per ns × 1e9 / 1e9 (= lanes × GHz × PEs)
    hbm_gbs: float               # aggregate HBM bandwidth (GB/s = bytes per ns)
    hbm_bytes: int               # aggregate HBM capacity
    pes: int
    cubes: int

    def line(self) -> str:
        """One summary line: 'peak 917.5 int8 TOPS, ... | HBM 2800 GB/s, 96 GiB'."""
        comp = ", ".join(f"{v:.1f} {k}" for k, v in self.tops.items())
        return (f"peak dense TOPS: {comp} | HBM {self.hbm_gbs:g} GB/s, "
                f"{self.hbm_bytes / 2**30:g} GiB | {self.pes} PEs in {self.cubes} cube(s)")


def peak_figures(topo: Topology) -> PeakFigures:
    """The peaks of `topo` (see the module docstring for the formulas)."""
    cfg = topo.config.cube
    g = cfg.pe_template.pe_gemm
    n_pes = len(topo.pes)
    macs = {bits: g.rows * g.cols * g.count * g.throughput_factor.get(bits, 1.0)
            * g.clock_ghz * n_pes for _, bits in PRECISIONS}
    tops = {label: round(2 * macs[bits] / 1000.0, 1) for label, bits in PRECISIONS}
    m = cfg.pe_template.pe_math
    hbm = cfg.hbm_ctrl
    return PeakFigures(tops=tops, macs_per_ns=macs,
                       vector_gelem_s=m.lanes * m.count * m.clock_ghz * n_pes,
                       hbm_gbs=hbm.channels * hbm.channel_bw_gbs * len(topo.cubes),
                       hbm_bytes=topo.hbm_bytes, pes=n_pes, cubes=len(topo.cubes))
