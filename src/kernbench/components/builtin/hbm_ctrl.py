"""HBM controller: address-interleaved channels, each a bandwidth server, plus latency.

A transfer of B bytes at address a splits into per-channel shares by the interleave
granularity (channel = (a // interleave) mod channels); every channel serves its share at
`channel_bw_gbs`, all channels at once, and the access adds `latency_ns`. Addresses outside
this cube's HBM window are an AddressError naming the access.
"""

from __future__ import annotations

from kernbench.components.base import ComponentBase
from kernbench.components.catalog import register
from kernbench.components.counters import MemoryCounters, ServerCounters
from kernbench.components.fabric import Server, mypyc_attr, occupy_parallel, transfer
from kernbench.errors import AddressError


class _HbmAccess:
    """The HBM as one stage of a transfer: per-channel shares served in parallel."""

    __slots__ = ("ctrl", "shares", "latency_ns", "_parallel")

    def __init__(self, ctrl: HbmCtrl, shares: list[tuple[Server, int]]) -> None:
        self.ctrl = ctrl
        self.shares = shares
        self.latency_ns = ctrl.spec.latency_ns
        # each share's serialisation time and reservation lists, read once: the channels
        # are plain Servers, reserved as `Server.occupy` would (fabric.occupy_parallel)
        self._parallel = tuple((ch, b, b / ch.bw_gbs, ch._starts, ch._ends)
                               for ch, b in shares)

    def occupy(
        self, head_ns: float, nbytes: int, min_end_ns: float, now: float
    ) -> tuple[float, float]:
        start, end = occupy_parallel(self._parallel, head_ns, now)
        if min_end_ns > end:
            end = min_end_ns
        self.ctrl.bytes += nbytes
        return (head_ns if start is None else start), end


class _BankedAccess:
    """The HBM reached through every channel's own port: each channel's share
    is one transfer over its own path (read: channel, its port, the mesh route to the PE;
    write: the reverse), all shares at once; the access ends when the last share has.
    The stage itself adds no latency (each share's path carries the HBM latency)."""

    __slots__ = ("ctrl", "paths", "write", "latency_ns")

    def __init__(self, ctrl: HbmCtrl, paths: list[tuple[tuple, int]], write: bool) -> None:
        self.ctrl = ctrl
        self.paths = paths  # (stages of one share's transfer, its bytes)
        self.write = write
        self.latency_ns = 0.0

    @property
    def link_shares(self) -> list[tuple[tuple, int]]:
        """(the links one share crosses, its bytes), for the action ledger."""
        return [(p[:-1] if self.write else p[1:], b) for p, b in self.paths]

    def occupy(
        self, head_ns: float, nbytes: int, min_end_ns: float, now: float
    ) -> tuple[float, float]:
        end = min_end_ns
        for stages, b in self.paths:
            e = transfer(head_ns, b, stages, now)
            if e > end:
                end = e
        self.ctrl.bytes += nbytes
        return head_ns, end


def channel_shares(offset: int, nbytes: int, interleave: int,
                   channels: int) -> list[tuple[int, int]]:
    """(channel, bytes) of a contiguous range starting `offset` bytes into a cube's HBM,
    exact, in channel order (channel = (offset // interleave) mod channels). The controller
    and the compiler's cost model both call this."""
    il, nch = interleave, channels
    out = [0] * nch
    a = offset
    end = a + nbytes
    first = a // il
    last = (end - 1) // il if nbytes else first - 1
    nblocks = last - first + 1
    if nblocks <= 0:
        return []
    full_rounds, rem = divmod(nblocks, nch)
    for i in range(nch):
        out[i] = full_rounds * il
    for j in range(rem):
        out[(first + full_rounds * nch + j) % nch] += il
    # trim the partial first and last blocks
    out[first % nch] -= a - first * il
    out[last % nch] -= (last + 1) * il - end
    return [(i, b) for i, b in enumerate(out) if b > 0]


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins may extend it
class HbmCtrl(ComponentBase):
    def __init__(self, node, sim) -> None:  # noqa: ANN001
        super().__init__(node, sim)
        cube = sim.topology.cube(node.cube)
        self.base = cube.hbm_base
        self.size = cube.hbm_bytes
        s = self.spec
        self.channels = [
            Server(f"{self.id}.ch{i}", s.latency_ns, s.channel_bw_gbs)
            for i in range(s.channels)
        ]
        self.bytes = 0
        # (offset within one interleave period, nbytes) → its access: the shares of a range
        # depend on nothing else, and programs repeat their tile sizes and strides
        self._period = s.interleave_bytes * s.channels
        self._access: dict[tuple[int, int], _HbmAccess] = {}
        self._banked: dict[tuple, _BankedAccess] = {}

    def check(self, addr: int, nbytes: int, what: str) -> None:
        if addr < self.base or addr + nbytes > self.base + self.size or nbytes < 0:
            raise AddressError(
                f"{what}: HBM range [{addr:#x}, {addr + nbytes:#x}) outside {self.id} "
                f"[{self.base:#x}, {self.base + self.size:#x})"
            )

    def shares(self, addr: int, nbytes: int) -> list[tuple[int, int]]:
        """(channel, bytes) for a contiguous range, exact, in channel order."""
        return channel_shares(addr - self.base, nbytes, self.spec.interleave_bytes,
                              self.spec.channels)

    def stage(self, addr: int, nbytes: int, what: str = "access") -> _HbmAccess:
        self.check(addr, nbytes, what)
        key = ((addr - self.base) % self._period, nbytes)
        acc = self._access.get(key)
        if acc is None:
            if len(self._access) >= 4096:
                self._access.clear()  # bounded: an odd program cannot grow it without end
            acc = self._access[key] = _HbmAccess(
                self, [(self.channels[i], b) for i, b in self.shares(addr, nbytes)])
        return acc

    def banked_stage(self, addr: int, nbytes: int, write: bool,
                     pe: int, links: list[tuple], what: str = "access") -> _BankedAccess:
        """The access of a range by PE `pe` through the channels' own ports:
        `links[i]` are the link servers between the PE and channel i, in transfer order."""
        self.check(addr, nbytes, what)
        key = (pe, write, (addr - self.base) % self._period, nbytes)
        acc = self._banked.get(key)
        if acc is None:
            if len(self._banked) >= 4096:
                self._banked.clear()
            ch = self.channels
            acc = self._banked[key] = _BankedAccess(self, [
                ((*links[i], ch[i]) if write else (ch[i], *links[i]), b)
                for i, b in self.shares(addr, nbytes)], write)
        return acc

    def memory_counters(self) -> MemoryCounters:
        """Bytes served and each channel's bytes and busy time."""
        return MemoryCounters(self.id, self.KIND, self.bytes, None, tuple(
            ServerCounters(ch.id, ch.bytes, ch.busy_ns) for ch in self.channels))


# registered here, not by a decorator: mypyc compiles a decorated class as plain Python
register("hbm_ctrl", "hbm_v1")(HbmCtrl)
