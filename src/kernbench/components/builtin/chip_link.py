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


def _packet_wire(payload: int, spec: ChipLinkSpec) -> int:
    framed = payload + spec.packet_header_bytes
    frames = -(-framed // spec.frame_max_bytes)
    return framed + frames * spec.frame_overhead_bytes


class FramedChipLink(ChipLink):
    """A chip link that frames packets: held for `wire_bytes(nbytes)` / `bw_gbs`. Its
    `bytes` counts payload; `busy_ns` the wire time."""

    __slots__ = ("spec",)

    def __init__(self, id: str, latency_ns: float, bw_gbs: float,
                 spec: ChipLinkSpec) -> None:
        super().__init__(id, latency_ns, bw_gbs)
        self.spec = spec

    def occupy(
        self, head_ns: float, nbytes: int, min_end_ns: float, now: float
    ) -> tuple[float, float]:
        wire = wire_bytes(nbytes, self.spec)
        span = Server.occupy(self, head_ns, wire, min_end_ns, now)
        self.bytes += nbytes - wire
        return span
