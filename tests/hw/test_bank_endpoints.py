"""HBM channels as mesh endpoints (ADR-0910) and the command virtual channel (ADR-0911),
against hand counts.

* `hbm_ctrl.channel_routers`: N PEs each reading one channel whose port sits on its own
  router finish together, in the time one reader alone takes (N× one channel's rate);
  with the nearest-port model the same reads queue on the one port. A range spread over
  every channel puts each channel's share on that channel's own port link, byte for byte.
* `m_cpu.command_vc`: a command whose path crosses links a multi-kilobyte transfer holds
  arrives as on an idle mesh; without it, it waits behind the transfer.
"""

from __future__ import annotations

import pytest
from hw_helpers import hbm_read_fixed_ns

from kernbench.cmdq.io import parse_program
from kernbench.common.pe_commands import DmaRead
from kernbench.components.builtin.hbm_ctrl import channel_shares
from kernbench.components.builtin.pe_dma import wire_bytes
from kernbench.host.simulate import simulate_program
from kernbench.topology import load_topology
from kernbench.topology.model import channel_endpoint, link_id

IL = 4096  # interleave: one read of IL bytes at channel c's offset stays in channel c
BIG = 1 << 17  # a multi-kilobyte transfer (half a TCM bank of `small`)
#: 4 channels, one port per router of `small`'s 2 x 2 mesh; channels are the bottleneck
BANKED = ("cube.hbm_ctrl.channels=4", f"cube.hbm_ctrl.interleave_bytes={IL}",
          "cube.hbm_ctrl.channel_bw_gbs=16", "cube.router.link_bw_gbs=4096",
          "cube.links.pe_router_bw_gbs=4096", "cube.hbm_ctrl.port_bw_gbs=4096",
          "cube.pe_template.pe_tcm.bw_gbs=4096")
PORTS = "cube.hbm_ctrl.channel_routers=[r0c0, r0c1, r1c0, r1c1]"


def _channel_of_pe(topo, pe: int) -> int:
    """The channel whose port is on PE `pe`'s router."""
    name = topo.pes[pe].router.rsplit(".", 1)[1]
    return topo.config.cube.hbm_ctrl.channel_routers.index(name)


@pytest.mark.parametrize("readers", [1, 2, 4])
def test_n_readers_on_n_banks_get_n_times_one_bank(make_sim, readers):
    sim = make_sim("small", *BANKED, PORTS)
    topo = sim.topology
    cfg = topo.config
    done = [sim.submit(pe, DmaRead(label=f"r{pe}", params={
        "nbytes": IL, "addr": _channel_of_pe(topo, pe) * IL})) for pe in range(readers)]
    sim.run()
    one = hbm_read_fixed_ns(cfg) + IL / cfg.cube.hbm_ctrl.channel_bw_gbs
    assert [d.value for d in done] == pytest.approx([one] * readers, abs=1e-9)


def test_nearest_port_model_queues_the_same_reads(make_sim):
    """The reference model: all four reads enter at r0c0's one port (attach [r0c0]), whose
    bandwidth is one channel's: the port serialises them, so the last ends at least
    4 × IL / bw after the fixed latency (and hop latencies differ by PE)."""
    sim = make_sim("small", *BANKED, "cube.hbm_ctrl.attach=[r0c0]",
                   "cube.hbm_ctrl.port_bw_gbs=16")
    done = [sim.submit(pe, DmaRead(label=f"r{pe}", params={"nbytes": IL, "addr": pe * IL}))
            for pe in range(4)]
    sim.run()
    ends = sorted(d.value for d in done)
    assert ends[-1] >= hbm_read_fixed_ns(sim.topology.config) + 4 * IL / 16
    assert ends[-1] - ends[0] >= 3 * IL / 16


def test_each_channel_share_crosses_its_own_port(make_sim):
    sim = make_sim("small", *BANKED, PORTS)
    topo = sim.topology
    cube = topo.cubes[0]
    addr, nbytes = 1000, 3 * IL + 123  # unaligned: four unequal shares
    sim.submit(3, DmaRead(label="r", params={"nbytes": nbytes, "addr": addr}))
    sim.run()
    wire = wire_bytes(topo.config.cube.pe_template.pe_dma.burst_bytes, nbytes, 1)
    want = dict(channel_shares(addr, wire, IL, 4))
    assert len(want) == 4
    names = topo.config.cube.hbm_ctrl.channel_routers
    for ch, b in want.items():
        port = link_id(channel_endpoint(cube, ch), f"{cube.id}.{names[ch]}")
        assert sim.servers[port].bytes == b
    # the shares meet at PE 3: its ejection link carries every byte once
    pe = topo.pes[3]
    assert sim.servers[link_id(pe.router, pe.id)].bytes == wire


def _program(with_transfer: bool) -> dict:
    """PE 1 loads 64 B once PE 2's short load is done; optionally PE 0 first multicasts
    BIG bytes to PE 1 over the links the command to PE 1 crosses (r0c0 -> r0c1 -> PE 1)."""
    load = {"opcode": "DMA_LOAD_TILE", "qbits": 8, "dram_addr": 0, "spm_bank": 0,
            "spm_offset": 0, "num_elements": 64}
    entries = []
    if with_transfer:
        entries.append({"opcode": "DMA_MCAST_TILE", "pe": 0, "qbits": 8,
                        "num_elements": BIG, "spm_bank": 0, "spm_offset": 0,
                        "dst_pes": [1], "dst_bank": 1, "dst_offset": 0})
    n = len(entries)
    entries += [{**load, "pe": 2, "id": n}, {**load, "pe": 1, "id": n + 1, "deps_before": [n]}]
    if with_transfer:
        entries[0]["id"] = 0
    entries.append({"opcode": "END", "id": n + 2})
    return {"cmdq": entries}


def _wait_ns(topo, with_transfer: bool) -> float:
    """Issue-to-start time of the PE 1 load (its command's trip + PE dispatch)."""
    st = simulate_program(parse_program(_program(with_transfer)), topo).stats()
    e = st["entries"][str(len(st["entries"]) - 2)]
    return e["start_ns"] - e["issue_ns"]


def test_command_vc_never_waits_behind_data():
    vc = load_topology("small", ["cube.m_cpu.command_vc=true"])
    idle = _wait_ns(vc, False)
    # closed form of the idle trip: the command packet cut through its three links
    cfg = vc.config
    path = vc.command_path(vc.cubes[0], vc.pes[1], True)
    trip = (sum(vc.links[lk].latency_ns for lk in path)
            + cfg.cube.m_cpu.command_bytes / min(vc.links[lk].bw_gbs for lk in path))
    pt = cfg.cube.pe_template
    assert idle >= trip
    assert _wait_ns(vc, True) == pytest.approx(idle, abs=1e-9)
    # the reference: on shared links the command waits for the BIG-byte transfer
    shared = load_topology("small", [])
    bw = min(shared.links[lk].bw_gbs for lk in path[1:])
    assert _wait_ns(shared, True) > idle + 0.5 * BIG / min(bw, pt.pe_tcm.bw_gbs)
