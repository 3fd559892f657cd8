"""Transfers over links and memories: latency + bytes / bandwidth, FIFO-contended.

Every wire, port and memory channel is a *reservation server*: it keeps the time it is
next free, and a transfer reserves it in issue order. This is the occupancy model gem5's
crossbar layers use; it needs no SimPy process per hop, so a DMA over k hops costs one
event instead of k, and it is exact for FIFO service.

A transfer of B bytes over stages s_1..s_n (latency L_i, bandwidth W_i) is cut-through:
stage i starts serialising at o_i = max(h_i, free_i), where h_i = o_{i-1} + L_{i-1} is when
the first byte arrives, and finishes at e_i = max(o_i + B / W_i, e_{i-1} + L_{i-1}) (it cannot send
bytes it has not received); the stage is then free again. The last byte arrives at the
destination at e_n + L_n. Uncontended, that is now + Σ L_i + B / min(W_i): latency plus
size over the bottleneck bandwidth.
"""

from __future__ import annotations

from typing import Protocol


class Stage(Protocol):
    latency_ns: float

    def occupy(self, head_ns: float, nbytes: int, min_end_ns: float) -> tuple[float, float]:
        """Reserve the stage for `nbytes` whose first byte arrives at `head_ns` and whose last
        byte arrives no earlier than `min_end_ns`; return (start, end) of serialisation."""
        ...


class Server:
    """One contended resource: a link direction, a memory port, a TCM port."""

    __slots__ = ("id", "latency_ns", "bw_gbs", "free_ns", "busy_ns", "bytes", "transfers")

    def __init__(self, id: str, latency_ns: float, bw_gbs: float) -> None:
        self.id = id
        self.latency_ns = latency_ns
        self.bw_gbs = bw_gbs
        self.free_ns = 0.0
        self.busy_ns = 0.0
        self.bytes = 0
        self.transfers = 0

    def occupy(self, head_ns: float, nbytes: int, min_end_ns: float) -> tuple[float, float]:
        start = self.free_ns if self.free_ns > head_ns else head_ns
        ser = nbytes / self.bw_gbs
        end = start + ser
        if min_end_ns > end:
            end = min_end_ns
        self.free_ns = end
        self.busy_ns += ser
        self.bytes += nbytes
        self.transfers += 1
        return start, end


def transfer(now: float, nbytes: int, stages: list[Stage] | tuple[Stage, ...]) -> float:
    """Reserve `stages` in order for an `nbytes` transfer starting at `now`; return its end."""
    head = now
    end = now
    lat = 0.0
    for s in stages:
        start, end = s.occupy(head, nbytes, end + lat)
        lat = s.latency_ns
        head = start + lat
    return end + lat
