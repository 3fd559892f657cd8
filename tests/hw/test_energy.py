"""Energy from action counts: closed forms for a GEMM done by hand on the hardware model,
the ledger against the timing's own counters, the area model, the power counter track."""

from __future__ import annotations

import math

import pytest

from kernbench.common.pe_commands import DmaRead, DmaWrite, GemmCmd, MathCmd
from kernbench.config import load_topology_config
from kernbench.errors import InputError
from kernbench.report.energy import energy_report, power_counter_events
from kernbench.report.stats import collect_stats
from kernbench.topology import load_topology
from kernbench.topology.area import area_report

# PE3 sits on r1c1; with the HBM attached to r0c0 only, every DMA crosses the two mesh
# links r0c0 → r0c1 → r1c1 (X first) plus two local ports (HBM ↔ r0c0, r1c1 ↔ PE3).
ONE_PORT = ("cube.hbm_ctrl.attach=[r0c0]",)
PRICE = "cube.pe_template."


def _gemm_by_hand(sim, m: int, n: int, k: int, bits: int) -> tuple[int, int, int]:
    """A, B in from HBM, C = A·B on pe_gemm, C out to HBM; returns the byte sizes."""
    a, b, c = m * k * bits // 8, k * n * bits // 8, m * n * 4
    sim.submit(3, DmaRead(label="A", params={"nbytes": a, "addr": 0}))
    sim.submit(3, DmaRead(label="B", params={"nbytes": b, "addr": 1 << 20}))
    sim.submit(3, GemmCmd(label="C=AB", params={"m": m, "n": n, "k": k, "qbits_weight": bits,
                                                 "qbits_activation": bits},
                          fetch_nbytes=a + b, store_nbytes=c))
    sim.submit(3, DmaWrite(label="C", params={"nbytes": c, "addr": 2 << 20}))
    return a, b, c


@pytest.mark.parametrize(("bits", "mac"), [(4, "int4"), (8, "int8"), (16, "fp16"),
                                          (32, "fp32")])
def test_gemm_dynamic_energy_equals_closed_form(make_sim, bits, mac):
    m, n, k = 64, 128, 256  # every transfer a whole number of 64-byte bursts
    sim = make_sim("small", *ONE_PORT)
    a, b, c = _gemm_by_hand(sim, m, n, k, bits)
    total = sim.run()
    cfg = sim.topology.config
    pt = cfg.cube.pe_template
    moved = a + b + c
    expected = (
        m * n * k * getattr(pt.pe_gemm, f"energy_pj_per_mac_{mac}")
        + moved * cfg.cube.hbm_ctrl.energy_pj_per_byte
        + (a + b + c) * pt.pe_tcm.energy_pj_per_byte_write  # DMA in A, B; store C
        + (a + b + c) * pt.pe_tcm.energy_pj_per_byte_read  # fetch A, B; DMA out C
        + (a + b) * pt.pe_fetch_store.energy_pj_per_byte_rf_write
        + c * pt.pe_fetch_store.energy_pj_per_byte_rf_read
        + 2 * moved * cfg.cube.router.energy_pj_per_byte_hop
        + 2 * moved * cfg.cube.router.energy_pj_per_byte_port
    )
    rep = energy_report(sim.topology, sim.actions.totals, total)
    assert rep.dynamic_pj == pytest.approx(expected, rel=1e-12)
    assert rep.counts[f"mac_{mac}"] == m * n * k == rep.macs
    n_inst = {}
    for node in sim.topology.nodes.values():
        n_inst[node.kind] = n_inst.get(node.kind, 0) + 1
    static = sum(n_inst[kd] * getattr(pt, kd).static_power_mw for kd in
                 ("pe_cpu", "pe_scheduler", "pe_dma", "pe_fetch_store", "pe_gemm", "pe_math",
                  "pe_tcm", "pe_mmu"))
    static += (n_inst["router"] * cfg.cube.router.static_power_mw
               + cfg.cube.hbm_ctrl.static_power_mw + cfg.cube.shared_sram.static_power_mw
               + cfg.cube.m_cpu.static_power_mw)
    assert rep.static_pj == pytest.approx(static * total, rel=1e-12)
    js = rep.to_json()
    assert js["tops_per_w"] == pytest.approx(2 * m * n * k / rep.total_pj, rel=1e-5)
    assert js["average_power_mw"] == pytest.approx(rep.total_pj / total, rel=1e-6)


def test_vector_op_lane_cycles(make_sim):
    sim = make_sim("small")
    sim.submit(0, MathCmd(label="exp", params={"op": "exp", "length": 1000, "rows": 3}))
    sim.run()
    s = sim.topology.config.cube.pe_template.pe_math
    busy_cycles = math.ceil(math.ceil(3000 / s.lanes) * s.op_cycles["exp"])  # after the fill
    assert sim.actions.totals["math_lane_cycle"] == busy_cycles * s.lanes


def test_ledger_counts_are_the_timing_counters(make_sim):
    """Every byte and MAC the ledger prices is one the timing model served, and back."""
    sim = make_sim("base")
    for pe in (0, 21, 47, 63):  # HBM at cube 0: PEs of other cubes cross UCIe
        sim.submit(pe, DmaRead(label="in", params={"nbytes": 4096 + 64 * pe, "addr": 64 * pe}))
        sim.submit(pe, GemmCmd(label="g", params={"m": 32, "n": 32, "k": 64},
                               fetch_nbytes=4096, store_nbytes=1024 + pe))
        sim.submit(pe, DmaWrite(label="out", params={"nbytes": 1000, "addr": 1 << 20}))
    total = sim.run()
    st = collect_stats(sim, total)
    kinds = {lid: link.kind for lid, link in sim.topology.links.items()}
    by_kind: dict[str, int] = {}
    for lid, row in st["links"].items():
        by_kind[kinds[lid]] = by_kind.get(kinds[lid], 0) + row["bytes"]
    acts = st["energy"]["actions"]
    assert acts["ucie_byte"] == by_kind["ucie"] > 0
    assert acts["mesh_hop_byte"] == by_kind["mesh"] > 0
    assert acts["port_byte"] == by_kind["pe"] + by_kind["hbm_port"]
    mems = st["memories"]
    assert acts["hbm_byte"] == sum(v["bytes"] for k, v in mems.items() if k.endswith("hbm_ctrl"))
    assert (acts["tcm_read_byte"] + acts["tcm_write_byte"]
            == sum(v["bytes"] for k, v in mems.items() if k.endswith("pe_tcm")))
    eng = st["engines"]
    assert acts["mac_int8"] == sum(e.get("macs", 0) for e in eng.values()) == 4 * 32 * 32 * 64
    assert acts["rf_write_byte"] == sum(e.get("bytes_fetched", 0) for e in eng.values())
    assert acts["rf_read_byte"] == sum(e.get("bytes_stored", 0) for e in eng.values())
    # per command: the commands' counts add up to the totals
    assert sim.actions.for_seqs(sim.actions.by_seq) == {a: v for a, v in acts.items() if v}


def test_power_track_integrates_to_the_energy(make_sim):
    sim = make_sim("small", *ONE_PORT)
    _gemm_by_hand(sim, 64, 64, 128, 8)
    total = sim.run()
    rep = energy_report(sim.topology, sim.actions.totals, total)
    ev = power_counter_events(sim.topology, sim.actions.events, total, pid=9, bins=50)
    width = total / 50
    got = sum(e["args"]["total"] * width for e in ev if e["name"] == "power_mw")
    assert got == pytest.approx(rep.total_pj, rel=1e-6)
    by_kind = [e for e in ev if e["name"] == "power_mw by kind"]
    assert sum(e["args"].get("pe_gemm", 0) * width for e in by_kind) == pytest.approx(
        rep.dynamic_pj_by_kind["pe_gemm"], rel=1e-6)


def test_doubling_a_price_changes_only_its_share_never_timing(make_sim):
    def run(*extra):
        sim = make_sim("small", *ONE_PORT, *extra)
        _gemm_by_hand(sim, 64, 64, 128, 8)
        total = sim.run()
        return collect_stats(sim, total), sim.tracer.spans

    base, spans = run()
    hbm = load_topology_config("small").cube.hbm_ctrl.energy_pj_per_byte
    dbl, spans2 = run(f"cube.hbm_ctrl.energy_pj_per_byte={2 * hbm}")
    assert spans2 == spans
    strip = ("energy",)
    assert {k: v for k, v in dbl.items() if k not in strip} == \
           {k: v for k, v in base.items() if k not in strip}
    e0, e1 = base["energy"]["by_component_kind"], dbl["energy"]["by_component_kind"]
    assert e1["hbm_ctrl"]["dynamic_pj"] == pytest.approx(2 * e0["hbm_ctrl"]["dynamic_pj"])
    assert {k: v for k, v in e1.items() if k != "hbm_ctrl"} == \
           {k: v for k, v in e0.items() if k != "hbm_ctrl"}
    assert dbl["energy"]["total_pj"] == pytest.approx(
        base["energy"]["total_pj"] + e0["hbm_ctrl"]["dynamic_pj"], rel=1e-9)


def test_area_closed_form_small_and_base():
    small = load_topology("small")
    cs = small.config.cube
    pt = cs.pe_template
    # r0c0: 2 mesh neighbours + HBM + PE0 + M_CPU + SRAM; the other three: 2 + HBM + PE
    ports = 6 + 3 * 4
    expect = {
        "pe_gemm": 4 * pt.pe_gemm.rows * pt.pe_gemm.cols * pt.pe_gemm.area_um2_per_cell / 1e6,
        "pe_math": 4 * pt.pe_math.lanes * pt.pe_math.area_um2_per_lane / 1e6,
        "pe_tcm": 4 * pt.pe_tcm.capacity_kib / 1024 * pt.pe_tcm.area_mm2_per_mib,
        "pe_fetch_store": 4 * pt.pe_fetch_store.register_file_kib / 1024
        * pt.pe_fetch_store.area_mm2_per_mib,
        "shared_sram": cs.shared_sram.capacity_kib / 1024 * cs.shared_sram.area_mm2_per_mib,
        "router": ports * cs.router.area_mm2_per_port,
        "hbm_ctrl": cs.hbm_ctrl.channels * cs.hbm_ctrl.area_mm2_per_channel,
        "m_cpu": cs.m_cpu.area_mm2,
        **{k: 4 * getattr(pt, k).area_mm2 for k in ("pe_cpu", "pe_scheduler", "pe_dma",
                                                     "pe_mmu")},
    }
    rep = area_report(small)
    assert rep.by_kind.keys() == expect.keys()
    for k, v in expect.items():
        assert rep.by_kind[k] == pytest.approx(v, rel=1e-12), k
    assert rep.total == pytest.approx(sum(expect.values()), rel=1e-12)
    base = area_report(load_topology("base"))
    u = load_topology("base").config.sip.ucie
    assert base.by_kind["ucie"] == pytest.approx(8 * u.bw_gbs * u.area_mm2_per_gbs)
    assert base.by_sip["sip0"] == pytest.approx(sum(base.by_cube.values()))
    assert base.total == pytest.approx(sum(base.by_kind.values()))
    # doubling the TCM doubles its area, nothing else
    big = area_report(load_topology("small", ["cube.pe_template.pe_tcm.capacity_kib=4096"]))
    assert big.by_kind["pe_tcm"] == pytest.approx(2 * rep.by_kind["pe_tcm"])
    assert {k: v for k, v in big.by_kind.items() if k != "pe_tcm"} == \
           {k: v for k, v in rep.by_kind.items() if k != "pe_tcm"}


def test_negative_energy_parameter_is_one_line_input_error():
    with pytest.raises(InputError, match="energy_pj_per_byte"):
        load_topology_config("small", ["cube.hbm_ctrl.energy_pj_per_byte=-1"])


def test_static_power_of_a_multi_cube_topology_counts_every_instance_and_ucie_link():
    """`base`: 2 × 2 cubes of 16 PEs and 16 routers; the cubes are joined by 4 UCIe links
    (2 across, 2 down), each two directed links. Its static power, by hand, is every
    instance's static power plus 8 × the UCIe link's, and a run's static energy is that
    times the run's time."""
    from kernbench.report.energy import static_power_mw

    topo = load_topology("base")
    cfg = topo.config
    cs, pt = cfg.cube, cfg.cube.pe_template
    per_pe = sum(getattr(pt, kd).static_power_mw for kd in (
        "pe_cpu", "pe_scheduler", "pe_dma", "pe_fetch_store", "pe_gemm", "pe_math", "pe_tcm",
        "pe_mmu"))
    per_cube = (16 * cs.router.static_power_mw + cs.hbm_ctrl.static_power_mw
                + cs.shared_sram.static_power_mw + cs.m_cpu.static_power_mw)
    ucie = 8 * cfg.sip.ucie.static_power_mw
    by_kind = static_power_mw(topo)
    assert by_kind["ucie"] == pytest.approx(ucie) and ucie > 0
    assert sum(by_kind.values()) == pytest.approx(64 * per_pe + 4 * per_cube + ucie)
    rep = energy_report(topo, {}, 1000.0)
    assert rep.static_pj == pytest.approx((64 * per_pe + 4 * per_cube + ucie) * 1000.0)
