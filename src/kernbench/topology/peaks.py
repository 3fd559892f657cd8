"""Peak rates of a topology and the roofline bound: the one home of these facts.

Everything here depends on the topology only (its config and its PE / cube counts):
- compute: MACs per ns of one PE's systolic array at an operand bitwidth
  (rows × cols × throughput factor(bits) × clock), of `n` PEs, and the SIMD vector rate
  (lanes × clock elements per ns per PE);
- bandwidth, in GB/s (= bytes per ns): HBM per cube (channels × channel bandwidth), HBM as
  reachable through a cube's router ports (the smaller of that and port bandwidth × routers),
  one mesh link, the mesh bisection of a cube, one UCIe link;
- the roofline bound of some work and bytes: max(work / rate, bytes / bandwidth).

The compiler's per-layer bounds, the report's roofs, the HTML headline and the kernel
front end's `roofline()` all read these functions; a new engine or bandwidth changes here
and nowhere else. The arithmetic order is part of the contract: the values are bit-exact
with the golden outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernbench.config.schema import FIDELITY_PHASES

if TYPE_CHECKING:
    from kernbench.config.schema import PeGemmSpec
    from kernbench.topology.model import Topology


@dataclass(frozen=True, slots=True)
class Roofline:
    """A roofline bound: the compute time and the memory time of the same work."""

    compute_ns: float
    memory_ns: float

    @property
    def bound_ns(self) -> float:
        """The lower bound on the time: the larger of the two."""
        return max(self.compute_ns, self.memory_ns)

    @property
    def bound_by(self) -> str:
        """"compute" or "memory": which roof binds (compute on a tie)."""
        return "compute" if self.compute_ns >= self.memory_ns else "memory"


@dataclass(frozen=True, slots=True)
class Roofs:
    """The two roofs a roofline plot draws; None when unknown (that roof is not drawn)."""

    peak_macs_per_ns: float | None
    hbm_gbs: float | None


def roofline(work: float, nbytes: float, rate_per_ns: float, bw_gbs: float) -> Roofline:
    """Bound of `work` units at `rate_per_ns` and `nbytes` at `bw_gbs` (bytes per ns)."""
    return Roofline(work / rate_per_ns, nbytes / bw_gbs)


# ---------------------------------------------------------------------------- compute
def throughput_factor(gemm: PeGemmSpec, bits: int) -> float:
    """How many times more MACs per cycle the array does at `bits`-bit operands (1.0 when
    the config names no factor for that width)."""
    return gemm.throughput_factor.get(bits, 1.0)


def pe_macs_per_ns(gemm: PeGemmSpec, bits: int) -> float:
    """Peak MACs per ns of one matrix engine: rows × cols × depth × factor(bits) × clock over
    the math-fidelity passes (a systolic array has depth 1 and runs LoFi, one pass)."""
    return (gemm.rows * gemm.cols * gemm.depth * throughput_factor(gemm, bits)
            * gemm.clock_ghz / FIDELITY_PHASES[gemm.math_fidelity])


def macs_per_ns(topo: Topology, bits: int, pes: int | None = None) -> float:
    """Peak MACs per ns of `pes` PEs (default: all of the system) at `bits`-bit operands."""
    n = len(topo.pes) if pes is None else pes
    return pe_macs_per_ns(topo.config.cube.pe_template.pe_gemm, bits) * n


def cube_macs_per_ns(topo: Topology, bits: int) -> float:
    """Peak MACs per ns of one cube's PEs."""
    return macs_per_ns(topo, bits, len(topo.config.cube.pe_layout))


def flops_per_ns(topo: Topology, bits: int, pes: int | None = None) -> float:
    """Peak FLOPs per ns (2 per MAC) of `pes` PEs (default all)."""
    return 2 * macs_per_ns(topo, bits, pes)


def vector_elems_per_ns(topo: Topology, pes: int | None = None) -> float:
    """Peak SIMD elements per ns of `pes` PEs (default all): lanes × clock × PEs."""
    m = topo.config.cube.pe_template.pe_math
    n = len(topo.pes) if pes is None else pes
    return m.lanes * m.clock_ghz * n


# ---------------------------------------------------------------------------- bandwidth
def hbm_gbs_per_cube(topo: Topology) -> float:
    """One cube's HBM bandwidth: channels × channel bandwidth."""
    h = topo.config.cube.hbm_ctrl
    return h.channels * h.channel_bw_gbs


def hbm_gbs(topo: Topology, cubes: int | None = None) -> float:
    """Aggregate HBM bandwidth of `cubes` cubes (default all)."""
    n = len(topo.cubes) if cubes is None else cubes
    return hbm_gbs_per_cube(topo) * n


def hbm_port_limited_gbs(topo: Topology, cubes: int = 1) -> float:
    """HBM bandwidth of `cubes` cubes as the mesh can draw it: per cube the smaller of the
    channels' bandwidth and the HBM port bandwidth × the cube's routers."""
    cs = topo.config.cube
    ports = cs.hbm_ctrl.port_bw_gbs * cs.mesh.rows * cs.mesh.cols
    return min(hbm_gbs_per_cube(topo), ports) * cubes


def mesh_link_gbs(topo: Topology) -> float:
    """One mesh link, one direction."""
    return topo.config.cube.router.link_bw_gbs


def mesh_bisection_gbs(topo: Topology) -> float:
    """One cube's mesh bisection, one direction: links cut by the narrower middle line."""
    mesh = topo.config.cube.mesh
    return min(mesh.rows, mesh.cols) * mesh_link_gbs(topo)


def ucie_gbs(topo: Topology) -> float:
    """One UCIe link between neighbouring cubes, one direction."""
    return topo.config.sip.ucie.bw_gbs


def chip_link_gbs(topo: Topology) -> float:
    """One chip-to-chip link, one direction (0 without a system section)."""
    system = topo.config.system
    return system.link.bw_gbs if system is not None else 0.0


def roofs(topo: Topology, bits: int = 8) -> Roofs:
    """The roofs of the whole system at `bits`-bit operands: all PEs' MACs per ns and the
    aggregate HBM bandwidth (what the compiler's per-layer bounds use)."""
    return Roofs(float(macs_per_ns(topo, bits)), float(hbm_gbs(topo)))


# ---------------------------------------------------------------------------- summary
#: precision label → operand bits looked up in pe_gemm.throughput_factor
PRECISIONS = (("int4", 4), ("int8", 8), ("fp16/bf16", 16), ("fp32", 32))


@dataclass(frozen=True)
class PeakFigures:
    """Dense peaks of the whole system, as `kernbench topology show` prints them."""

    tops: dict[str, float]         # precision label → tera-ops/s (2 ops per MAC)
    macs_per_ns: dict[int, float]  # operand bits → MACs per ns
    vector_elems_per_ns: float
    hbm_gbs: float                 # aggregate HBM bandwidth (GB/s = bytes per ns)
    hbm_bytes: int                 # aggregate HBM capacity
    pes: int
    cubes: int

    def line(self) -> str:
        """One line: 'peak dense TOPS: … int8, … | HBM 2800 GB/s, 96 GiB | 16 PEs …'."""
        comp = ", ".join(f"{v:.1f} {k}" for k, v in self.tops.items())
        return (f"peak dense TOPS: {comp} | HBM {self.hbm_gbs:g} GB/s, "
                f"{self.hbm_bytes / 2**30:g} GiB | {self.pes} PEs in {self.cubes} cube(s)")


def peak_figures(topo: Topology) -> PeakFigures:
    """The system's peaks: compute by precision (flops_per_ns), HBM bandwidth and capacity."""
    macs = {bits: macs_per_ns(topo, bits) for _, bits in PRECISIONS}
    return PeakFigures(tops={label: round(flops_per_ns(topo, bits) / 1000.0, 1)
                             for label, bits in PRECISIONS},
                       macs_per_ns=macs, vector_elems_per_ns=vector_elems_per_ns(topo),
                       hbm_gbs=hbm_gbs(topo), hbm_bytes=topo.hbm_bytes, pes=len(topo.pes),
                       cubes=len(topo.cubes))
