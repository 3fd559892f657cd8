"""Packet framing on the chip-to-chip links (`system.link.packet_payload_bytes` and the
keys after it): the link is held for the framed bytes, checked against the closed form of
tt-metal's fabric payload efficiency P / (P + H + F · ceil((P + H) / M))."""

from __future__ import annotations

import math

import pytest

from kernbench.components.builtin.chip_link import ChipLink, FramedChipLink, wire_bytes
from kernbench.components.fabric import transfer
from kernbench.config import load_topology_config

FRAMING = ("system.link.packet_payload_bytes=4352", "system.link.packet_header_bytes=48",
           "system.link.frame_max_bytes=1500", "system.link.frame_overhead_bytes=50")


def _link(*ov: str):  # noqa: ANN202
    return load_topology_config("small", ["system.chips=2", *ov]).system.link


def _efficiency(p: int, h: int, m: int, f: int) -> float:
    return p / (p + h + f * math.ceil((p + h) / m))


@pytest.mark.parametrize("packets", [1, 2, 15, 1000])
def test_whole_packets_cost_payload_over_the_published_efficiency(packets: int) -> None:
    spec = _link(*FRAMING)
    nbytes = packets * 4352
    assert wire_bytes(nbytes, spec) == pytest.approx(nbytes / _efficiency(4352, 48, 1500, 50))
    # the t3k preset carries the same four figures
    t3k = load_topology_config("t3k").system.link
    assert wire_bytes(nbytes, t3k) == wire_bytes(nbytes, spec)


@pytest.mark.parametrize("rest, frames", [(1, 1), (1452, 1), (1453, 2), (2952, 2), (2953, 3),
                                          (4351, 3)])
def test_a_partial_packet_is_sized_by_its_bytes(rest: int, frames: int) -> None:
    """The last packet carries only the rest: its header plus one frame overhead per
    started 1500-byte frame."""
    spec = _link(*FRAMING)
    assert wire_bytes(rest, spec) == rest + 48 + 50 * frames
    full = 3 * (4352 + 48 + 50 * 3)
    assert wire_bytes(3 * 4352 + rest, spec) == full + rest + 48 + 50 * frames


def test_without_a_packet_payload_the_link_carries_raw_bytes() -> None:
    spec = _link("system.link.packet_header_bytes=48")
    assert wire_bytes(65536, spec) == 65536
    link = ChipLink.from_spec("l", 711.0, 12.5, spec)
    assert type(link) is ChipLink  # the plain server, reserved inline by `transfer`
    assert transfer(0.0, 65536, [link]) == pytest.approx(711.0 + 65536 / 12.5)


def test_a_framed_link_is_held_for_the_wire_bytes_back_to_back() -> None:
    spec = _link(*FRAMING)
    link = ChipLink.from_spec("l", 711.0, 12.5, spec)
    assert isinstance(link, FramedChipLink)
    wire = wire_bytes(65536, spec)
    assert transfer(0.0, 65536, [link]) == pytest.approx(711.0 + wire / 12.5)
    # a second transfer issued at once waits for the first one's wire time
    assert transfer(0.0, 65536, [link]) == pytest.approx(711.0 + 2 * wire / 12.5)
    assert link.bytes == 2 * 65536 and link.busy_ns == pytest.approx(2 * wire / 12.5)


def test_a_dma_into_another_chips_hbm_pays_the_framed_bytes(make_sim) -> None:  # noqa: ANN001
    """The same 64 KiB TCM → HBM write into the neighbour chip with and without framing:
    the chip link is the path's bottleneck, so the framed one ends later by exactly the
    extra wire bytes over its bandwidth; the energy counts payload bytes either way."""
    from kernbench.common.pe_commands import DmaWrite

    base = ("system.chips=2", "system.link.bw_gbs=4", "system.link.latency_ns=1000",
            "cube.hbm_ctrl.attach=[r0c0]")
    nbytes = 65536
    times = []
    for ov in (base, base + FRAMING):
        sim = make_sim("small", *ov)
        addr = sim.topology.cubes[1].hbm_base
        done = sim.submit(0, DmaWrite(label="w", params={"nbytes": nbytes, "addr": addr}))
        sim.run()
        times.append(done.value)
        assert sim.actions.totals["chip_link_byte"] == nbytes
    extra = wire_bytes(nbytes, _link(*FRAMING)) - nbytes
    assert extra == 15 * (48 + 150) + 48 + 50  # 15 whole packets and a 256-byte one
    assert times[1] - times[0] == pytest.approx(extra / 4)
