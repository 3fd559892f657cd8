"""The chips of a disaggregated run: one chip's topology, the pools, the KV transfer.

`one_chip(topo)` is the topology of one chip of a system (the `system:` section dropped,
one SIP): every step program runs on one chip, as a model replica does. `ChipPools` splits
the system's chips into prefill chips (the first `prefill`) and decode chips (the rest).
`KvTransfer` times sending one request's KV cache from a prefill chip to a decode chip
over the chip-to-chip links of the route between them: the route's hops × the link's
latency (cut-through) plus the bytes at `links_per_pair` links' bandwidth (the transfer
is split over the parallel links of each neighbour pair), in integer ns.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernbench.errors import InputError
from kernbench.topology import Topology, build_topology
from kernbench.topology.model import chip_port


def one_chip(topo: Topology) -> Topology:
    cfg = topo.config
    if cfg.system is None:
        return topo
    sip = cfg.sip.model_copy(update={"count": 1})
    return build_topology(cfg.model_copy(update={"system": None, "sip": sip}))


@dataclass(frozen=True)
class ChipPools:
    prefill: int
    decode: int

    @staticmethod
    def split(topo: Topology, prefill: int | None) -> ChipPools:
        chips = topo.chips
        if chips < 2:
            raise InputError(f"the disaggregated policy needs a system of at least 2 chips; "
                             f"'{topo.name}' has {chips} (a multi-chip preset such as t3k, or "
                             "--set system.chips=N)", field="--policy")
        p = chips // 2 if prefill is None else prefill
        if not 1 <= p < chips:
            raise InputError(f"must leave at least one prefill and one decode chip of "
                             f"{chips}, got {p}", field="--prefill-chips")
        return ChipPools(p, chips - p)


@dataclass(frozen=True)
class KvTransfer:
    """`ns(tokens, src, dst)`: prefill chip `src` → decode chip `dst` (pool indices)."""

    topo: Topology
    pools: ChipPools
    bytes_per_token: int

    def hops(self, src: int, dst: int) -> int:
        cfg = self.topo.config
        return len(self.topo.route(chip_port(cfg, src), chip_port(cfg, self.pools.prefill + dst)))

    def describe(self) -> dict[str, object]:
        link = self.topo.config.system.link  # type: ignore[union-attr]
        return {"model": "hops × latency_ns + bytes / (bw_gbs × links_per_pair)",
                "latency_ns": link.latency_ns, "bw_gbs": link.bw_gbs,
                "links_per_pair": link.links_per_pair}

    def ns(self, tokens: int, src: int, dst: int) -> int:
        link = self.topo.config.system.link  # type: ignore[union-attr]
        bytes_ = tokens * self.bytes_per_token
        return round(self.hops(src, dst) * link.latency_ns
                     + bytes_ / (link.bw_gbs * link.links_per_pair))
