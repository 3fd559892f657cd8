"""topology.peaks against the numbers worked out by hand from the preset YAML files.

small: 1 cube, 4 PEs, 32×32 arrays at 1 GHz, 64 lanes, HBM 8 × 32 GB/s, ports 256 GB/s
on a 2×2 mesh, mesh links 128 GB/s, UCIe 256 GB/s. base: 4 cubes of 16 PEs, HBM 16 × 64
GB/s per cube, ports 512 GB/s on a 4×4 mesh. Default throughput factors: 4-bit ×2, 8-bit
×1, 32-bit ×0.25.
"""

from __future__ import annotations

import pytest

from kernbench.topology import load_topology, peaks
from kernbench.triton_emu.runtime import roofline


@pytest.fixture(scope="module")
def small():
    return load_topology("small")


@pytest.fixture(scope="module")
def base():
    return load_topology("base")


def test_compute_peaks_by_operand_bits(small, base):
    g = small.config.cube.pe_template.pe_gemm
    assert peaks.pe_macs_per_ns(g, 8) == 1024.0
    assert peaks.pe_macs_per_ns(g, 4) == 2048.0
    assert peaks.pe_macs_per_ns(g, 32) == 256.0
    assert peaks.pe_macs_per_ns(g, 3) == 1024.0  # no factor named: 1.0
    assert peaks.macs_per_ns(small, 8) == 4 * 1024.0
    assert peaks.macs_per_ns(base, 8) == 64 * 1024.0
    assert peaks.macs_per_ns(base, 8, pes=5) == 5 * 1024.0
    assert peaks.cube_macs_per_ns(base, 4) == 16 * 2048.0
    assert peaks.flops_per_ns(small, 16) == 2 * 4 * 1024.0
    assert peaks.vector_elems_per_ns(base) == 64 * 64.0


def test_bandwidth_peaks(small, base):
    assert peaks.hbm_gbs_per_cube(small) == 256.0
    assert peaks.hbm_gbs(base) == 4 * 1024.0
    assert peaks.hbm_gbs(base, cubes=1) == 1024.0
    # ports: small 256 × 4 routers = 1024 ≥ 256 channels; base 512 × 16 ≥ 1024
    assert peaks.hbm_port_limited_gbs(small) == 256.0
    assert peaks.hbm_port_limited_gbs(base, cubes=2) == 2048.0
    narrow = load_topology("small", ["cube.hbm_ctrl.port_bw_gbs=16"])
    assert peaks.hbm_port_limited_gbs(narrow) == 16.0 * 4
    assert peaks.mesh_link_gbs(small) == 128.0
    assert peaks.mesh_bisection_gbs(base) == 4 * 128.0
    assert peaks.ucie_gbs(small) == 256.0


def test_roofline_bound():
    r = peaks.roofline(4096.0, 1024.0, 1024.0, 256.0)
    assert (r.compute_ns, r.memory_ns, r.bound_ns, r.bound_by) == (4.0, 4.0, 4.0, "compute")
    r = peaks.roofline(100.0, 1000.0, 10.0, 10.0)
    assert (r.bound_ns, r.bound_by) == (100.0, "memory")
    assert peaks.roofs(load_topology("small")) == peaks.Roofs(4096.0, 256.0)


def test_the_kernel_roofline_reads_the_same_peaks(small):
    rf = roofline(small, 2 * 256 ** 3, 3 * 256 * 256 * 2, 16, pes=2)
    assert rf["peak_flops_per_ns"] == 2 * 2 * 1024.0
    assert rf["compute_ns"] == 2 * 256 ** 3 / 4096.0
    assert rf["memory_ns"] == 3 * 256 * 256 * 2 / 256.0
    assert rf["bound_ns"] == max(rf["compute_ns"], rf["memory_ns"])
