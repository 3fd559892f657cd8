"""Chip-to-chip link (e.g. Ethernet between two chips): a bandwidth server with latency.

The simulator asks the registry for the server class of each `chip_link` link, so a model
with e.g. credit flow control can replace this one through `system.link.impl`; a class
with a `from_spec(id, latency_ns, bw_gbs, spec)` constructor is built through it.

Packet framing (`system.link.packet_payload_bytes` > 0): a transfer of B bytes crosses
the link as packets of at most P payload bytes (the last one partial, sized by its
bytes), each behind an H-byte fabric header and cut into link-layer frames of at most M
bytes, each frame adding F bytes. The link is held for the wire bytes over `bw_gbs`:

    wire(B) = floor(B / P) · w(P) + w(B mod P),   w(p) = p + H + F · ceil((p + H) / M)

(w(0) = 0). Without framing, wire(B) = B.

Ring flow control (`system.link.ring_flow_control_ns` = c > 0, framing on): a fabric
configured as a ring adds deadlock avoidance to every router, a cost paid by every packet
whatever route it takes. The fabric fills its packets from the sending core's buffer, so
a transfer's packets are counted as packets' worth of payload, B / P: a DMA from banked
DRAM crosses here as one transfer per channel share, pieces that the fabric would pack
together. Each full packet holds the link c ns longer:

    hold(B) = wire(B) / bw_gbs + (B / P) · c
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernbench.components.catalog import register
from kernbench.components.fabric import Server

if TYPE_CHECKING:
    from kernbench.config.schema import ChipLinkSpec


@register("chip_link", "chip_link_v1")
class ChipLink(Server):
    """A plain reservation server; latency and bandwidth come from `system.link`."""

    @classmethod
    def from_spec(cls, id: str, latency_ns: float, bw_gbs: float,
                  spec: ChipLinkSpec) -> Server:
        """This server, or a `FramedChipLink` when `spec` frames packets."""
        if spec.packet_payload_bytes == 0:
            return cls(id, latency_ns, bw_gbs)
        return FramedChipLink(id, latency_ns, bw_gbs, spec)


def wire_bytes(nbytes: int, spec: ChipLinkSpec) -> int:
    """Bytes a transfer of `nbytes` puts on the wire under `spec`'s framing (module
    docstring); `nbytes` itself when framing is off."""
    p = spec.packet_payload_bytes
    if p == 0 or nbytes <= 0:
        return nbytes
    full, rest = divmod(nbytes, p)
    return full * _packet_wire(p, spec) + (_packet_wire(rest, spec) if rest else 0)


def packets(nbytes: int, spec: ChipLinkSpec) -> float:
    """Full fabric packets' worth of payload in a transfer of `nbytes` (0 without framing)."""
    p = spec.packet_payload_bytes
    if p == 0 or nbytes <= 0:
        return 0.0
    return nbytes / p


def hold_ns(nbytes: int, spec: ChipLinkSpec, bw_gbs: float) -> float:
    """Time a transfer of `nbytes` holds one link under `spec` (module docstring)."""
    return wire_bytes(nbytes, spec) / bw_gbs + packets(nbytes, spec) * spec.ring_flow_control_ns


def _packet_wire(payload: int, spec: ChipLinkSpec) -> int:
    framed = payload + spec.packet_header_bytes
    frames = -(-framed // spec.frame_max_bytes)
    return framed + frames * spec.frame_overhead_bytes


class FramedChipLink(ChipLink):
    """A chip link that frames packets: held for `hold_ns(nbytes)` (the wire bytes over
    `bw_gbs`, plus the ring flow control per packet). Its `bytes` counts payload;
    `busy_ns` the holding time."""

    __slots__ = ("spec", "_flow_bytes")

    def __init__(self, id: str, latency_ns: float, bw_gbs: float,
                 spec: ChipLinkSpec) -> None:
        super().__init__(id, latency_ns, bw_gbs)
        self.spec = spec
        # a packet's flow-control time as the bytes the link would carry meanwhile
        self._flow_bytes = spec.ring_flow_control_ns * bw_gbs

    def occupy(
        self, head_ns: float, nbytes: int, min_end_ns: float, now: float
    ) -> tuple[float, float]:
        spec = self.spec
        wire = wire_bytes(nbytes, spec)
        if self._flow_bytes:  # held for the wire bytes and the flow control's worth
            held = wire + packets(nbytes, spec) * self._flow_bytes
            self.bytes += nbytes
            return self.occupy_for(head_ns, held / self.bw_gbs, min_end_ns, now)
        span = Server.occupy(self, head_ns, wire, min_end_ns, now)
        self.bytes += nbytes - wire
        return span
