"""The `system:` section: chips joined by chip-to-chip links (docs/topologies.md)."""

from __future__ import annotations

import pytest

from kernbench.cli import main
from kernbench.config import load_topology_config
from kernbench.errors import InputError
from kernbench.topology import load_topology
from kernbench.topology.area import area_report
from kernbench.topology.chips import chip_route, is_cycle, neighbour_pairs, ring_order


def _system(arr: str, chips: int, shape: list[int] | None = None):  # noqa: ANN202
    ov = [f"system.chips={chips}", f"system.arrangement={arr}"]
    if shape:
        ov.append(f"system.shape=[{shape[0]},{shape[1]}]")
    return load_topology_config("small", ov).system


def test_t3k_is_eight_n150_chips_in_a_2x4_mesh_with_two_ethernet_links_per_pair() -> None:
    t = load_topology("t3k")
    n150 = load_topology("n150")
    assert t.chips == 8 and t.config.system.grid == (2, 4)
    assert len(t.pes) == 8 * len(n150.pes)
    chip_links = [lk for lk in t.links.values() if lk.kind == "chip_link"]
    # a 2 x 4 mesh has 2·3 + 4·1 = 10 neighbour pairs; 2 links each, 2 directions
    assert len(chip_links) == 10 * 2 * 2
    assert {(lk.bw_gbs, lk.latency_ns) for lk in chip_links} == {(12.5, 711.0)}
    # each chip keeps n150's insides
    assert sum(1 for lk in t.links.values() if lk.kind == "mesh") == 8 * sum(
        1 for lk in n150.links.values() if lk.kind == "mesh")


@pytest.mark.parametrize(("arr", "chips", "shape", "pairs"), [
    ("line", 5, None, 4), ("ring", 5, None, 5), ("ring", 2, None, 1),
    ("mesh2d", 12, [3, 4], 3 * 3 + 2 * 4), ("torus2d", 12, [3, 4], 2 * 12),
    ("torus2d", 8, [2, 4], 4 * 2 + 4),  # a 2-long axis wraps onto the same pair
])
def test_neighbour_pairs_follow_the_arrangement(arr: str, chips: int, shape, pairs: int) -> None:  # noqa: ANN001
    assert len(neighbour_pairs(_system(arr, chips, shape))) == pairs


def test_set_system_chips_on_a_one_chip_preset_makes_a_line() -> None:
    t = load_topology("small", ["system.chips=8"])
    assert t.config.sip.count == 8 and t.config.system.arrangement == "line"
    assert len(t.cubes) == 8 and len(t.pes) == 8 * 4
    assert sum(1 for lk in t.links.values() if lk.kind == "chip_link") == 7 * 2


def test_one_chip_has_no_system_and_no_chip_links() -> None:
    t = load_topology("small")
    assert t.config.system is None and t.chips == 1
    assert not any(lk.kind == "chip_link" for lk in t.links.values())


def test_chip_routes_go_columns_first_and_the_short_way_round() -> None:
    mesh = _system("mesh2d", 8, [2, 4])
    assert chip_route(mesh, 0, 7) == [(0, 1), (1, 2), (2, 3), (3, 7)]
    ring = _system("ring", 8)
    assert chip_route(ring, 0, 6) == [(0, 7), (7, 6)]
    assert chip_route(ring, 0, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]  # tie: increasing way
    torus = _system("torus2d", 16, [4, 4])
    assert len(chip_route(torus, 0, 15)) == 2  # one wrap on each axis


def test_a_dma_path_to_another_chips_hbm_crosses_its_chip_links_on_the_pes_lane() -> None:
    t = load_topology("t3k")
    pe = t.pes[5]  # chip 0, local PE 5: lane 5 % 2 = 1
    hbm7 = t.cubes[7]
    path = t.memory_path(pe, hbm7.hbm_ctrl, t.hbm_router_for(pe.router, hbm7), True)
    chip_hops = [lid for lid in path if t.links[lid].kind == "chip_link"]
    assert chip_hops == [f"sip{a}.cube0.r0c0->sip{b}.cube0.r0c0#1"
                         for a, b in ((0, 1), (1, 2), (2, 3), (3, 7))]
    assert path[-1] == "sip7.cube0.r0c0->sip7.cube0.hbm_ctrl"


def test_commands_to_another_chips_pe_come_from_that_chips_m_cpu() -> None:
    t = load_topology("t3k")
    path = t.command_path(t.cubes[0], t.pes[64 * 6 + 3], True)
    assert path[0] == "sip6.cube0.m_cpu->sip6.cube0.r0c0"
    assert not any(t.links[lid].kind == "chip_link" for lid in path)


@pytest.mark.parametrize(("arr", "chips", "shape", "cycle"), [
    ("mesh2d", 8, [2, 4], True), ("torus2d", 9, [3, 3], True), ("ring", 6, None, True),
    ("mesh2d", 9, [3, 3], False), ("line", 4, None, False), ("mesh2d", 12, [3, 4], True),
])
def test_ring_order_is_a_cycle_where_the_arrangement_has_one(arr, chips, shape, cycle) -> None:  # noqa: ANN001
    s = _system(arr, chips, shape)
    order = ring_order(s)
    assert sorted(order) == list(range(chips))
    assert is_cycle(s, order) == cycle


def test_chip_links_add_their_area_half_on_each_chip() -> None:
    t = load_topology("small", ["system.chips=2", "system.link.area_mm2_per_link=3.0"])
    one = area_report(load_topology("small"))
    two = area_report(t)
    assert two.by_kind["chip_link"] == pytest.approx(2 * 3.0)  # 1 pair, 2 directions
    # and each chip's port router has one more port (the link to the other chip)
    port = t.config.cube.router.area_mm2_per_port
    assert two.total == pytest.approx(2 * one.total + 6.0 + 2 * port)


@pytest.mark.parametrize(("ov", "needle"), [
    (["system.chips=0"], "system.chips"),
    (["system.chips=4", "system.arrangement=hex"], "system.arrangement"),
    (["system.chips=6", "system.arrangement=mesh2d", "system.shape=[2,4]"], "holds 8 chips"),
    (["system.chips=4", "system.shape=[2,2]"], "only mesh2d and torus2d"),
    (["system.chips=4", "sip.count=3"], "differs from system.chips"),
    (["system.chips=2", "system.link.router=r9c9"], "system.link.router"),
])
def test_bad_system_input_is_one_line(ov: list[str], needle: str) -> None:
    with pytest.raises(InputError) as e:
        load_topology_config("small", ov)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_cli_bad_system_exits_2_with_one_line(capsys) -> None:  # noqa: ANN001
    code = main(["topology", "show", "small", "--set", "system.chips=0"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().count("\n") == 0 and "system.chips" in err and "Traceback" not in err


def test_cli_draws_the_chips(capsys, tmp_path) -> None:  # noqa: ANN001
    svg = tmp_path / "x8.svg"
    assert main(["topology", "show", "large-x8", "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert "[chip0] == [chip1]" in out and "wrap-around: chip0-chip3" in out
    text = svg.read_text()
    assert text.count("<rect") == 8 and text.count("stroke-dasharray") == 2  # 2 wraps


def test_a_dma_into_another_chips_hbm_pays_the_chip_link(make_sim) -> None:  # noqa: ANN001
    """The same 64 KiB TCM → HBM write into the own chip and into the neighbour chip: the
    far one is later by the chip link's latency plus its serialization, and counts its
    bytes once as chip_link_byte."""
    from kernbench.common.pe_commands import DmaWrite

    ov = ("system.chips=2", "system.link.bw_gbs=4", "system.link.latency_ns=1000",
          "cube.hbm_ctrl.attach=[r0c0]")
    nbytes = 65536
    times = []
    for addr_chip in (0, 1):
        sim = make_sim("small", *ov)
        addr = sim.topology.cubes[addr_chip].hbm_base
        done = sim.submit(0, DmaWrite(label="w", params={"nbytes": nbytes, "addr": addr}))
        sim.run()
        times.append(done.value)
        assert sim.actions.totals["chip_link_byte"] == nbytes * addr_chip
    # PE0 sits on r0c0, the port router: the far write adds one chip link (serialised at
    # 4 GB/s, the bottleneck) and its latency; nothing else on the path changes
    local_bw = min(sim.topology.config.cube.links.pe_router_bw_gbs,
                   sim.topology.config.cube.hbm_ctrl.port_bw_gbs,
                   sim.topology.config.cube.hbm_ctrl.channel_bw_gbs * 8,
                   sim.topology.config.cube.pe_template.pe_tcm.bw_gbs)
    assert times[1] - times[0] == pytest.approx(1000 + nbytes / 4 - nbytes / local_bw)
