"""Ring flow control on the chip-to-chip links (`system.link.ring_flow_control_ns`): every
fabric packet holds the link c ns longer, checked against the closed form
hold(B) = wire(B) / bw + (B / P) · c (packets' worth of payload: the fabric fills its
packets), with wire(B) written out by hand below."""

from __future__ import annotations

import pytest

from kernbench.components.builtin.chip_link import ChipLink, FramedChipLink, hold_ns, packets
from kernbench.components.fabric import transfer
from kernbench.config import load_topology_config
from kernbench.errors import InputError

FRAMING = ("system.link.packet_payload_bytes=4352", "system.link.packet_header_bytes=48",
           "system.link.frame_max_bytes=1500", "system.link.frame_overhead_bytes=50")
#: one full packet on the wire: 4352 B payload + 48 B header in 3 frames of ≤ 1500 B, 50 B each
FULL_WIRE = 4352 + 48 + 3 * 50
BW = 12.5
C = 37.5


def _link(*ov: str):  # noqa: ANN202
    return load_topology_config("small", ["system.chips=2", *ov]).system.link


@pytest.mark.parametrize("n", [1, 2, 16, 1000])
def test_n_packets_over_one_link_take_n_times_wire_plus_the_cost(n: int) -> None:
    spec = _link(*FRAMING, f"system.link.ring_flow_control_ns={C}")
    link = ChipLink.from_spec("l", 711.0, BW, spec)
    assert isinstance(link, FramedChipLink)
    assert packets(n * 4352, spec) == n
    assert transfer(0.0, n * 4352, [link]) == pytest.approx(711.0 + n * (FULL_WIRE / BW + C))
    assert link.busy_ns == pytest.approx(n * (FULL_WIRE / BW + C))
    assert link.bytes == n * 4352 and isinstance(link.bytes, int)  # payload, not wire


def test_a_partial_packet_pays_its_share_of_the_cost() -> None:
    """The fabric fills its packets, so a piece of a packet (e.g. one DRAM channel's share
    of a DMA) pays the cost in proportion to its payload; its framing is its own."""
    spec = _link(*FRAMING, f"system.link.ring_flow_control_ns={C}")
    rest = 1088  # a quarter packet, one frame: 1088 + 48 B, plus 50 B
    assert packets(2 * 4352 + rest, spec) == 2.25
    want = (2 * FULL_WIRE + rest + 48 + 50) / BW + 2.25 * C
    assert hold_ns(2 * 4352 + rest, spec, BW) == pytest.approx(want)


def test_back_to_back_transfers_queue_behind_each_others_cost() -> None:
    spec = _link(*FRAMING, f"system.link.ring_flow_control_ns={C}")
    link = ChipLink.from_spec("l", 711.0, BW, spec)
    one = 16 * (FULL_WIRE / BW + C)
    assert transfer(0.0, 16 * 4352, [link]) == pytest.approx(711.0 + one)
    assert transfer(0.0, 16 * 4352, [link]) == pytest.approx(711.0 + 2 * one)


def test_the_default_is_a_line_fabric_without_the_cost() -> None:
    spec = _link(*FRAMING)
    assert spec.ring_flow_control_ns == 0
    link = ChipLink.from_spec("l", 711.0, BW, spec)
    assert transfer(0.0, 4352, [link]) == pytest.approx(711.0 + FULL_WIRE / BW)


def test_a_cost_per_packet_without_packets_is_refused_in_one_line() -> None:
    with pytest.raises(InputError) as e:
        _link("system.link.ring_flow_control_ns=10")
    msg = str(e.value)
    assert "ring_flow_control_ns" in msg and "packet_payload_bytes" in msg and "\n" not in msg


def test_only_t3k_configures_its_fabric_as_a_ring() -> None:
    assert load_topology_config("t3k").system.link.ring_flow_control_ns > 0
    assert load_topology_config("large-x8").system.link.ring_flow_control_ns == 0
    for preset in ("small", "base", "large", "n150", "p150"):
        system = load_topology_config(preset, ["system.chips=2"]).system
        assert system.link.ring_flow_control_ns == 0, preset


def test_a_dma_into_another_chips_hbm_pays_the_cost_of_each_packet(make_sim) -> None:  # noqa: ANN001
    """The same 64 KiB TCM → HBM write into the neighbour chip, framed, with and without
    the cost: the chip link is the path's bottleneck, so it ends later by exactly
    65536 / 4352 packets' worth × c; the energy counts payload bytes either way."""
    from kernbench.common.pe_commands import DmaWrite

    base = ("system.chips=2", "system.link.bw_gbs=4", "system.link.latency_ns=1000",
            "cube.hbm_ctrl.attach=[r0c0]", *FRAMING)
    nbytes = 65536
    times = []
    for ov in (base, (*base, f"system.link.ring_flow_control_ns={C}")):
        sim = make_sim("small", *ov)
        addr = sim.topology.cubes[1].hbm_base
        done = sim.submit(0, DmaWrite(label="w", params={"nbytes": nbytes, "addr": addr}))
        sim.run()
        times.append(done.value)
        assert sim.actions.totals["chip_link_byte"] == nbytes
    assert times[1] - times[0] == pytest.approx(65536 / 4352 * C)
