"""Transfers over links and memories: latency + bytes / bandwidth, FIFO-contended.

Every wire, port and memory channel is a *reservation server*: it keeps the intervals it
is reserved for, and a transfer takes the earliest gap that fits, in issue order. This is
the occupancy model gem5's crossbar layers use; it needs no SimPy process per hop, so a
DMA over k hops costs one event instead of k. A transfer that needs a port now is not
pushed behind another transfer's reservation further in the future: it fills the gap.

A transfer of B bytes over stages s_1..s_n (latency L_i, bandwidth W_i) is cut-through:
stage i starts serialising at o_i = max(h_i, free_i), where h_i = o_{i-1} + L_{i-1} is when
the first byte arrives, and finishes at e_i = max(o_i + B / W_i, e_{i-1} + L_{i-1}) (it cannot send
bytes it has not received); the stage is then free again. The last byte arrives at the
destination at e_n + L_n. Uncontended, that is now + Σ L_i + B / min(W_i): latency plus
size over the bottleneck bandwidth.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Protocol

try:  # mypyc's class options; plain Python runs without mypy installed
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover - the decorator then changes nothing
    def mypyc_attr(*_a: object, **_k: object) -> Any:  # type: ignore[misc]  # noqa: ANN401
        return lambda cls: cls


class Stage(Protocol):
    latency_ns: float

    def occupy(
        self, head_ns: float, nbytes: int, min_end_ns: float, now: float
    ) -> tuple[float, float]:
        """Reserve the stage for `nbytes` whose first byte arrives at `head_ns` and whose last
        byte arrives no earlier than `min_end_ns`; return (start, end) of serialisation.
        `now` is the current simulation time: reservations ending before it are forgotten."""
        ...


#: Server classes whose `occupy` is Server's own (`transfer` reserves them inline)
_INLINE: set[type] = set()


@mypyc_attr(allow_interpreted_subclasses=True)  # ChipLink, UcieLink and plug-ins extend it
class Server:
    """One contended resource: a link direction, a memory port, a TCM port.

    Reservations are disjoint intervals kept as two sorted lists (starts, ends), so finding
    the first gap is a bisection, not a scan. The two lists are changed in place, never
    replaced: a `Route` holds them."""

    __slots__ = ("id", "latency_ns", "bw_gbs", "busy_ns", "bytes", "transfers", "_starts",
                 "_ends")

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        if cls.occupy is Server.occupy:  # same timing as Server: `transfer` may inline it
            _INLINE.add(cls)

    def __init__(self, id: str, latency_ns: float, bw_gbs: float) -> None:
        self.id = id
        self.latency_ns = latency_ns
        self.bw_gbs = bw_gbs
        self.busy_ns = 0.0
        self.bytes = 0
        self.transfers = 0
        self._starts: list[float] = []
        self._ends: list[float] = []

    def occupy(
        self, head_ns: float, nbytes: int, min_end_ns: float, now: float
    ) -> tuple[float, float]:
        self.bytes += nbytes
        return self.occupy_for(head_ns, nbytes / self.bw_gbs, min_end_ns, now)

    def occupy_for(
        self, head_ns: float, ser: float, min_end_ns: float, now: float
    ) -> tuple[float, float]:
        """`occupy` for `ser` ns of serialisation, its bytes counted by the caller (a
        subclass that holds the link for more than the bytes it carries)."""
        self.busy_ns += ser
        self.transfers += 1
        starts, ends = self._starts, self._ends
        if ends and ends[0] <= now:  # forget reservations that ended
            k = bisect_right(ends, now)
            del starts[:k]
            del ends[:k]
        if not ends or ends[-1] <= head_ns:  # fast path: free from head_ns on
            end = head_ns + ser
            if min_end_ns > end:
                end = min_end_ns
            if ends and ends[-1] == head_ns:
                ends[-1] = end  # back-to-back: extend, keep the lists short
            else:
                starts.append(head_ns)
                ends.append(end)
            return head_ns, end
        return self._fit(head_ns, ser, min_end_ns)

    def _fit(self, head_ns: float, ser: float, min_end_ns: float) -> tuple[float, float]:
        """Place a reservation of `ser` ns (ending no earlier than `min_end_ns`) in the first
        gap from `head_ns` on, when the last reservation ends after `head_ns`."""
        starts, ends = self._starts, self._ends
        i = bisect_right(ends, head_ns)  # first reservation still busy at head_ns
        start = head_ns
        n = len(ends)
        while i < n:
            end = start + ser
            if min_end_ns > end:
                end = min_end_ns
            if end <= starts[i]:
                break  # fits in the gap before reservation i
            if ends[i] > start:
                start = ends[i]
            i += 1
        end = start + ser
        if min_end_ns > end:
            end = min_end_ns
        starts.insert(i, start)
        ends.insert(i, end)
        return start, end


class InterleavedServer(Server):
    """A server shared packet by packet: a transfer fed slower than this
    server's bandwidth holds it only for its own bytes at its own rate, not for the whole
    time its bytes trickle in; other transfers' packets use the gaps.

    The held time is placed where the last bytes pass: [e - B / W, e) with e no earlier
    than the upstream's last byte (`min_end_ns`), in the first gap that fits. Contention
    that pushes it later delays the transfer's first byte by as much. Uncontended, a
    transfer's end equals Server's; only the occupancy other transfers see differs."""

    __slots__ = ()

    def occupy(
        self, head_ns: float, nbytes: int, min_end_ns: float, now: float
    ) -> tuple[float, float]:
        ser = nbytes / self.bw_gbs
        self.busy_ns += ser
        self.bytes += nbytes
        self.transfers += 1
        starts, ends = self._starts, self._ends
        if ends and ends[0] <= now:
            k = bisect_right(ends, now)
            del starts[:k]
            del ends[:k]
        want = head_ns if min_end_ns - ser < head_ns else min_end_ns - ser
        start, end = self._fit(want, ser, 0.0)
        return head_ns + (start - want), (end if end > min_end_ns else min_end_ns)


def transfer(now: float, nbytes: int, stages: list[Stage] | tuple[Stage, ...],
             forget_before: float | None = None) -> float:
    """Reserve `stages` in order for an `nbytes` transfer starting at `now`; return its end.
    Reservations that ended before `forget_before` (default `now`) are dropped: a caller
    that places transfers out of time order (the compiler's cost model) passes a time no
    later transfer starts before.

    A plain `Server` stage (one whose class keeps `Server.occupy`) is reserved inline here,
    with the same arithmetic as `occupy` (this is the simulator's most called function);
    any other stage is asked through its `occupy`."""
    keep = now if forget_before is None else forget_before
    head = now
    end = now
    lat = 0.0
    inline = _INLINE
    hops: Any = stages  # each a Stage; an inline one is read as a Server below
    for st in hops:
        cls = st.__class__
        if cls is not Server and cls not in inline:
            start, end = st.occupy(head, nbytes, end + lat, keep)
            lat = st.latency_ns
            head = start + lat
        else:
            s: Server = st  # compiled (setup.py): a checked cast; plain Python: a name
            min_end = end + lat
            ser = nbytes / s.bw_gbs
            s.busy_ns += ser
            s.bytes += nbytes
            s.transfers += 1
            ends = s._ends
            if ends:
                last = ends[-1]
                if last <= keep:  # every reservation has ended: this one replaces them
                    start = head
                    end = head + ser
                    if min_end > end:
                        end = min_end
                    if len(ends) == 1:
                        s._starts[0] = head
                        ends[0] = end
                    else:
                        ends.clear()
                        s._starts.clear()
                        s._starts.append(head)
                        ends.append(end)
                    lat = s.latency_ns
                    head = start + lat
                    continue
                if ends[0] <= keep:  # forget those that ended
                    k = bisect_right(ends, keep)
                    del s._starts[:k]
                    del ends[:k]
            if not ends:
                start = head
                end = head + ser
                if min_end > end:
                    end = min_end
                s._starts.append(head)
                ends.append(end)
            elif last <= head:  # free from head on
                start = head
                end = head + ser
                if min_end > end:
                    end = min_end
                if last == head:
                    ends[-1] = end  # back-to-back: extend
                else:
                    s._starts.append(head)
                    ends.append(end)
            else:
                start, end = s._fit(head, ser, min_end)
            lat = s.latency_ns
            head = start + lat
    return end + lat


_INLINE.add(Server)


def occupy_parallel(shares: tuple[tuple[Server, int, float, list[float], list[float]], ...],
                    head_ns: float, now: float) -> tuple[float | None, float]:
    """Reserve plain `Server`s side by side, each for its own bytes from `head_ns` on:
    `shares` holds (server, bytes, its serialisation ns, its reservation lists). The same
    as `server.occupy(head_ns, bytes, 0.0, now)` for each in order, with the same
    arithmetic inline; returns (the earliest start or None without shares, the latest end,
    at least 0.0)."""
    start = None
    end = 0.0
    for s, b, ser, starts, ends in shares:
        s.busy_ns += ser
        s.bytes += b
        s.transfers += 1
        if ends and ends[0] <= now:  # forget reservations that ended
            k = bisect_right(ends, now)
            del starts[:k]
            del ends[:k]
        if not ends or ends[-1] <= head_ns:  # free from head_ns on
            st = head_ns
            e = head_ns + ser
            if e < 0.0:  # min_end_ns 0.0, as occupy is called
                e = 0.0
            if ends and ends[-1] == head_ns:
                ends[-1] = e
            else:
                starts.append(head_ns)
                ends.append(e)
        else:
            st, e = s._fit(head_ns, ser, 0.0)
        if start is None or st < start:
            start = st
        if e > end:
            end = e
    return start, end


class Route:
    """A fixed path for transfers of one size (M_CPU's command and completion packets):
    each stage's serialisation time is computed once. `reserve(now)` is
    `transfer(now, nbytes, stages)`: the same arithmetic on the same values in the same
    order, so the same reservations and end; only the per-hop look-ups are gone."""

    __slots__ = ("stages", "nbytes", "_hops")

    def __init__(self, stages: tuple[Stage, ...] | list[Stage], nbytes: int) -> None:
        self.stages = tuple(stages)
        self.nbytes = nbytes
        # (stage, whether `transfer` reserves it inline, its serialisation ns if so,
        # latency, and an inline stage's reservation lists: a Server keeps the same two
        # list objects for its lifetime; another stage's are empty placeholders)
        hops: list[tuple[Any, bool, float, float, list[float], list[float]]] = []
        for st in self.stages:
            if st.__class__ in _INLINE:
                srv: Any = st
                hops.append((st, True, nbytes / srv.bw_gbs, st.latency_ns, srv._starts,
                             srv._ends))
            else:
                hops.append((st, False, 0.0, st.latency_ns, [], []))
        self._hops = tuple(hops)

    def reserve(self, now: float) -> float:
        """Reserve the route for one transfer starting at `now`; return its end."""
        nbytes = self.nbytes
        head = now
        end = now
        lat = 0.0
        for st, direct, ser, s_lat, starts, ends in self._hops:
            min_end = end + lat
            if not direct:
                start, end = st.occupy(head, nbytes, min_end, now)
            else:
                s: Server = st  # compiled (setup.py): a checked cast; plain Python: a name
                s.busy_ns += ser
                s.bytes += nbytes
                s.transfers += 1
                last = 0.0
                if ends:
                    last = ends[-1]
                    if last <= now:
                        ends.clear()
                        starts.clear()
                    elif ends[0] <= now:
                        k = bisect_right(ends, now)
                        del starts[:k]
                        del ends[:k]
                if not ends:
                    start = head
                    end = head + ser
                    if min_end > end:
                        end = min_end
                    starts.append(head)
                    ends.append(end)
                elif last <= head:
                    start = head
                    end = head + ser
                    if min_end > end:
                        end = min_end
                    if last == head:
                        ends[-1] = end
                    else:
                        starts.append(head)
                        ends.append(end)
                else:
                    start, end = s._fit(head, ser, min_end)
            lat = s_lat
            head = start + lat
        return end + lat
