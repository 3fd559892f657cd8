"""The `large` preset sits in the datacenter band the issue names, and `topology show`
prints the peaks of every preset (checked against the closed-form formula)."""

from __future__ import annotations

import pytest

from kernbench.cli import main
from kernbench.config import preset_names
from kernbench.topology import load_topology
from kernbench.topology.peaks import peak_figures


def test_large_is_a_datacenter_npu():
    topo = load_topology("large")
    cfg = topo.config.cube
    g = cfg.pe_template.pe_gemm
    # closed form: PEs × rows × cols × 2 ops × GHz, int8 factor 1
    int8_tops = len(topo.pes) * g.rows * g.cols * 2 * g.clock_ghz / 1000
    assert 400 <= int8_tops <= 1000
    hbm_tbs = len(topo.cubes) * cfg.hbm_ctrl.channels * cfg.hbm_ctrl.channel_bw_gbs / 1000
    assert 2.0 <= hbm_tbs <= 4.0
    assert topo.hbm_bytes >= 64 * 2**30
    assert len(topo.cubes) >= 2
    p = peak_figures(topo)
    assert p.tops["int8"] == pytest.approx(int8_tops, abs=0.05)
    assert p.hbm_gbs == pytest.approx(hbm_tbs * 1000)


@pytest.mark.parametrize("name", preset_names())
def test_topology_show_prints_peaks(name, capsys):
    assert main(["topology", "show", name]) in (0, None)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    p = peak_figures(load_topology(name))
    assert last.startswith("peak dense TOPS:")
    assert f"{p.tops['int8']:.1f} int8" in last
    assert f"HBM {p.hbm_gbs:g} GB/s" in last and f"{p.hbm_bytes / 2**30:g} GiB" in last
