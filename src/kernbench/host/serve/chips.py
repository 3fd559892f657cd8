"""The chips of a disaggregated run: one chip's topology, the pools, the KV transfer.

`one_chip(topo)` is the topology of one chip of a system (the `system:` section dropped,
one SIP): every step program runs on one chip, as a model replica does. `ChipPools` splits
the system's chips into prefill chips (the first `prefill`) and decode chips (the rest).
`KvTransfer` times sending one request's KV cache from a prefill chip to a decode chip
over the chip-to-chip links between them, from a simulated send/recv program.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kernbench.compiler.collectives import Collective
from kernbench.errors import InputError
from kernbench.host.collective import run_collective
from kernbench.host.serve.buckets import interpolate
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
        return ChipPools.of(topo.chips, prefill, f"'{topo.name}'")

    @staticmethod
    def of(chips: int, prefill: int | None, name: str = "the topology") -> ChipPools:
        """`chips` split into `prefill` prefill chips (None: half) and the rest decode;
        InputError when that leaves a pool empty (`name`: the topology, for the message)."""
        if chips < 2:
            raise InputError(f"the disaggregated policy needs a system of at least 2 chips; "
                             f"{name} has {chips} (a multi-chip preset such as t3k, or "
                             "--set system.chips=N)", field="--policy")
        p = chips // 2 if prefill is None else prefill
        if not 1 <= p < chips:
            raise InputError(f"must leave at least one prefill and one decode chip of "
                             f"{chips}, got {p}", field="--prefill-chips")
        return ChipPools(p, chips - p)


@dataclass
class KvTransfer:
    """`ns(tokens, src, dst)`: prefill chip `src` → decode chip `dst` (pool indices).

    The time is a simulated program: a send/recv collective (pulls: DMA reads
    of the other chip's HBM over the chip route) of the KV bytes as bf16 elements, run on
    the whole system. Programs are memoized per chip-route distance (the first pool pair,
    in order, at that many hops stands for every pair at that distance: the same links
    and routers on a symmetric system) and per token count through the serving bucket
    rule (`buckets.interpolate`; every count simulated with `exact`)."""

    topo: Topology
    pools: ChipPools
    bytes_per_token: int
    exact: bool = False
    simulate: Callable[[Topology, int, int, int], float] | None = None
    programs: dict[tuple[tuple[int, int], int], float] = field(default_factory=dict)
    pairs: dict[int, tuple[int, int]] = field(default_factory=dict)  # hops → its pair

    def hops(self, src: int, dst: int) -> int:
        cfg = self.topo.config
        return len(self.topo.route(chip_port(cfg, src), chip_port(cfg, self.pools.prefill + dst)))

    def describe(self) -> dict[str, object]:
        """The transfer's parameters for stats.json: how it is timed, the KV bytes per
        token, and every simulated send (its chips, tokens, bytes, ns and GB/s)."""
        sends = [{"src_chip": a, "dst_chip": self.pools.prefill + b, "tokens": t,
                  "bytes": t * self.bytes_per_token, "ns": round(ns, 3),
                  "gb_per_s": round(t * self.bytes_per_token / ns, 3) if ns else None}
                 for ((a, b), t), ns in sorted(self.programs.items())]
        return {"model": "simulated send_recv of the KV bytes over the chip route, per "
                         "route distance and token bucket",
                "bytes_per_token": self.bytes_per_token,
                "programs": len(self.programs), "sends": sends}

    def ns(self, tokens: int, src: int, dst: int) -> int:
        hops = self.hops(src, dst)
        pair = self.pairs.get(hops)
        if pair is None:
            pair = self.pairs[hops] = next(
                (a, b) for a in range(self.pools.prefill) for b in range(self.pools.decode)
                if self.hops(a, b) == hops)
        if self.exact:
            return round(self._program(pair, tokens))
        return round(interpolate((tokens,), lambda shape: self._program(pair, shape[0])))

    def _program(self, pair: tuple[int, int], tokens: int) -> float:
        key = (pair, tokens)
        ns = self.programs.get(key)
        if ns is None:
            sim = self.simulate or simulated_send
            ns = sim(self.topo, pair[0], self.pools.prefill + pair[1],
                     tokens * self.bytes_per_token)
            self.programs[key] = ns
        return ns


def simulated_send(topo: Topology, src_chip: int, dst_chip: int, nbytes: int) -> float:
    """Simulated ns of moving `nbytes` from chip `src_chip`'s HBM to `dst_chip`'s."""
    c = Collective("send_recv", max(1, -(-nbytes // 2)), (src_chip, dst_chip), dtype="bf16")
    return float(run_collective(topo, c).run.total_ns)
