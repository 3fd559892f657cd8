"""Plan a collective as tile moves: which chip copies or reduces which elements, from
where to where, after which other moves.

A `Move` runs on one chip (its worker PE pulls): `copy` reads `src` and writes `dst`;
`reduce` reads `src` and `src2` and writes their element-wise sum to `dst`. Addresses are
global HBM byte addresses; a source on another chip is read over the chip links. Each
move depends on the moves that last wrote any element it reads (read-after-write, found by
address overlap), so every phase of an algorithm waits for exactly the tiles it needs.
Every buffer region is written once per collective, so there is no write-after-read.

Ranks are positions in `Collective.chips` (the group order). Per-rank buffers sit at the
same offsets in each chip's HBM (`Buffers`): `in` (the input), `out` (the result) and
`scratch` (partial sums), each `count` elements (all-gather: `in` holds count / N).

Algorithms:
- ring: reduce-scatter then all-gather around the group in order (each step a rank pulls
  one chunk from its predecessor); `bidirectional` splits every chunk in two halves that go
  round in opposite directions (both directions of every link carry half the bytes), and a
  step's two halves are tiled together, their tiles taken in turn, so the workers that
  take tiles in turn pull over both inbound links at once whatever the size;
- direct: every rank pulls what it needs straight from its owner (multi-hop routes);
- 2d: on a rows × cols chip grid, ring reduce-scatter along each row, ring all-reduce of
  the owned row chunk along each column, ring all-gather along each row.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from kernbench.errors import InputError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
ALGORITHMS = ("ring", "direct", "2d")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True, slots=True)
class Buffers:
    """Byte offsets (from each chip's HBM base) of the per-rank buffers."""

    inp: int
    out: int
    scratch: int
    flags: int  # one 64-byte flag per barrier round


@dataclass(frozen=True)
class Collective:
    """One collective: `op` on `count` elements of `dtype` per rank over `chips` (global
    chip indices, in rank order) by `algorithm`; send_recv moves rank 0's `in` to rank 1's
    `out`. `grid` (rows, cols) is the chip grid of the 2d algorithm."""

    op: str
    count: int
    chips: tuple[int, ...]
    algorithm: str = "ring"
    dtype: str = "bf16"
    bidirectional: bool = True
    grid: tuple[int, int] | None = None

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def nbytes(self) -> int:
        """Bytes of each rank's input (all-gather: its shard)."""
        n = self.count // len(self.chips) if self.op == "all_gather" else self.count
        return n * self.elem_bytes


@dataclass(slots=True)
class Move:
    id: int
    chip: int
    kind: str                 # "copy" | "reduce"
    src: int                  # global HBM byte address
    dst: int
    n: int                    # elements
    src2: int | None = None   # reduce: the second operand
    deps: list[int] = field(default_factory=list)


class _Planner:
    """Accumulates moves, tiling each transfer and tracking the last writer of every
    written byte range (disjoint ranges, sorted by start)."""

    def __init__(self, c: Collective, bases: list[int], buf: Buffers, tile_elems: int) -> None:
        self.c = c
        self.bases = bases
        self.buf = buf
        self.tile = tile_elems
        self.moves: list[Move] = []
        self._starts: list[int] = []
        self._writes: dict[int, tuple[int, int]] = {}  # start → (end, move id)
        self.gate: dict[int, int] = {}  # chip → the move every later move on it waits for

    def addr(self, rank_chip: int, which: str, elem: int) -> int:
        off = {"in": self.buf.inp, "out": self.buf.out, "scratch": self.buf.scratch,
               "flags": self.buf.flags}[which]
        return self.bases[rank_chip] + off + elem * self.c.elem_bytes

    def _writers(self, a: int, b: int) -> list[int]:
        i = bisect.bisect_left(self._starts, b)
        out = []
        while i > 0:
            i -= 1
            s = self._starts[i]
            end, mid = self._writes[s]
            if end <= a:
                break
            out.append(mid)
        return out

    def move(self, chip: int, kind: str, src: int, dst: int, n: int,
             src2: int | None = None) -> None:
        """One transfer of `n` elements, cut into tiles of at most `tile` elements."""
        self.moves_together([(chip, kind, src, dst, n, src2)])

    def moves_together(self, transfers: list[tuple[int, str, int, int, int, int | None]]
                       ) -> None:
        """Transfers (chip, kind, src, dst, n, src2) that run at the same time, each cut
        into tiles as `move` does, their tiles taken in turn (the first tile of each, then
        the second of each, ...): the two halves of a bidirectional ring step then share
        every worker's turns, so both of a chip's inbound links carry tiles together."""
        eb = self.c.elem_bytes
        longest = max((t[4] for t in transfers), default=0)
        for t0 in range(0, longest, self.tile):
            for chip, kind, src, dst, n, src2 in transfers:
                if t0 < n:
                    self._tile_move(chip, kind, src + t0 * eb, dst + t0 * eb,
                                    min(self.tile, n - t0),
                                    None if src2 is None else src2 + t0 * eb)

    def _tile_move(self, chip: int, kind: str, s: int, d: int, k: int,
                   s2: int | None) -> None:
        """One tile move, after the moves that last wrote what it reads."""
        eb = self.c.elem_bytes
        deps = self._writers(s, s + k * eb)
        if chip in self.gate:
            deps.append(self.gate[chip])
        if s2 is not None:
            deps += self._writers(s2, s2 + k * eb)
        m = Move(len(self.moves), chip, kind, s, d, k, s2, sorted(set(deps)))
        self.moves.append(m)
        self._record(d, d + k * eb, m.id)

    def _record(self, a: int, b: int, mid: int) -> None:
        """Move `mid` is now the last writer of [a, b): earlier writes keep only their
        parts outside it."""
        i = bisect.bisect_left(self._starts, b)
        cut: list[tuple[int, int, int]] = []
        while i > 0:
            s = self._starts[i - 1]
            end, oid = self._writes[s]
            if end <= a:
                break
            cut.append((s, end, oid))
            i -= 1
        for s, end, oid in cut:
            self._starts.remove(s)
            del self._writes[s]
            if s < a:
                self._put(s, a, oid)
            if end > b:
                self._put(b, end, oid)
        self._put(a, b, mid)

    def _put(self, a: int, b: int, mid: int) -> None:
        bisect.insort(self._starts, a)
        self._writes[a] = (b, mid)


def _chunks(count: int, parts: int) -> list[tuple[int, int]]:
    """(start, length) of `parts` nearly equal consecutive pieces of `count` elements."""
    q, r = divmod(count, parts)
    out, s = [], 0
    for i in range(parts):
        n = q + (1 if i < r else 0)
        out.append((s, n))
        s += n
    return out


def _halves(start: int, n: int, two: bool) -> list[tuple[int, int, int]]:
    """(direction, start, length) of a chunk's parts: one forward part, or two halves."""
    if not two or n < 2:
        return [(1, start, n)]
    h = n // 2
    return [(1, start, h), (-1, start + h, n - h)]


def _ring_rs(p: _Planner, ranks: list[int], region: tuple[int, int], src: str, dst: str,
             dst_off: int | None, two: bool) -> None:
    """Ring reduce-scatter of `region` (start, count) of buffer `src` over `ranks`: rank r
    ends with chunk r reduced, written to `dst` at element `dst_off` (None: at the chunk's
    own place). Partial sums go to `scratch` at the chunk's place."""
    n = len(ranks)
    start, count = region
    chunks = _chunks(count, n)
    for s in range(n - 1):
        last = s == n - 2
        for r in range(n):
            step = []
            for k_dir in (1, -1) if two else (1,):
                k = (r - k_dir * (s + 2)) % n
                c0, cn = chunks[k]
                for d, h0, hn in _halves(start + c0, cn, two):
                    if d != k_dir or hn == 0:
                        continue
                    prev = ranks[(r - d) % n]
                    me = ranks[r]
                    other = p.addr(prev, src if s == 0 else "scratch", h0)
                    own = p.addr(me, src, h0)
                    if last:
                        at = h0 if dst_off is None else dst_off + (h0 - start - c0)
                        out = p.addr(me, dst, at)
                    else:
                        out = p.addr(me, "scratch", h0)
                    step.append((me, "reduce", own, out, hn, other))
            p.moves_together(step)


def _ring_ag(p: _Planner, ranks: list[int], region: tuple[int, int], src: str,
             src_off: int | None, dst: str, two: bool) -> None:
    """Ring all-gather of `region` of buffer `dst` over `ranks`: rank r holds chunk r in
    `src` (at element `src_off`, or at the chunk's place when None) and ends with every
    chunk in `dst`. A rank first copies its own chunk when `src` is another buffer."""
    n = len(ranks)
    start, count = region
    chunks = _chunks(count, n)

    def held(rank: int, k: int, h0: int) -> int:
        c0 = chunks[k][0]
        if src_off is None:
            return p.addr(rank, src, h0)
        return p.addr(rank, src, src_off + (h0 - start - c0))

    if src != dst or src_off is not None:
        for r in range(n):
            c0, cn = chunks[r]
            p.move(ranks[r], "copy", held(ranks[r], r, start + c0),
                   p.addr(ranks[r], dst, start + c0), cn)
    for s in range(n - 1):
        for r in range(n):
            step = []
            for k_dir in (1, -1) if two else (1,):
                k = (r - k_dir * (s + 1)) % n
                c0, cn = chunks[k]
                for d, h0, hn in _halves(start + c0, cn, two):
                    if d != k_dir or hn == 0:
                        continue
                    prev = ranks[(r - d) % n]
                    step.append((ranks[r], "copy", p.addr(prev, dst, h0),
                                 p.addr(ranks[r], dst, h0), hn, None))
            p.moves_together(step)


def _direct_rs(p: _Planner, ranks: list[int], count: int, dst_off: bool) -> None:
    """Each rank sums its chunk from every rank (its own first, then the others in rank
    order after it); partial sums alternate between the two halves of `scratch`
    (2 × count elements), the last sum goes to `out` (at element 0 when `dst_off`)."""
    n = len(ranks)
    for r, (c0, cn) in enumerate(_chunks(count, n)):
        me = ranks[r]
        acc = p.addr(me, "in", c0)
        for i in range(1, n):
            q = ranks[(r + i) % n]
            if i == n - 1:
                out = p.addr(me, "out", 0 if dst_off else c0)
            else:
                out = p.addr(me, "scratch", c0 + (count if i % 2 == 0 else 0))
            p.move(me, "reduce", acc, out, cn, src2=p.addr(q, "in", c0))
            acc = out


def _direct_ag(p: _Planner, ranks: list[int], count: int, src: str, src_off: bool) -> None:
    """Each rank copies every chunk from its owner into `out`."""
    n = len(ranks)
    chunks = _chunks(count, n)
    for r in range(n):
        for i in range(n):
            q = (r + i) % n
            c0, cn = chunks[q]
            p.move(ranks[r], "copy", p.addr(ranks[q], src, 0 if src_off else c0),
                   p.addr(ranks[r], "out", c0), cn)


def _all_to_all(p: _Planner, ranks: list[int], count: int) -> None:
    """Rank r's `out` chunk q is rank q's `in` chunk r (direct pulls)."""
    n = len(ranks)
    chunks = _chunks(count, n)
    for r in range(n):
        for i in range(n):
            q = (r + i) % n
            p.move(ranks[r], "copy", p.addr(ranks[q], "in", chunks[r][0]),
                   p.addr(ranks[r], "out", chunks[q][0]), chunks[r][1] if q == r else
                   min(chunks[r][1], chunks[q][1]))


#: bytes between two barrier flags (a flag is one element; each sits in its own line)
FLAG_STRIDE = 64


def barrier_rounds(n: int) -> int:
    """Rounds of a dissemination barrier of `n` ranks: ceil(log2 n)."""
    return (n - 1).bit_length()


def _barrier(p: _Planner, ranks: list[int]) -> None:
    """Entry barrier (dissemination): in round k rank r pulls a one-element flag from
    rank r − 2^k (round 0: the first element of its input; later rounds: the flag that
    rank wrote in the round before) into its own flag k. Every later move of a rank
    waits for its last round, so no rank starts before every rank has arrived."""
    n = len(ranks)
    eb = p.c.elem_bytes
    for k in range(barrier_rounds(n)):
        for r in range(n):
            peer = ranks[(r - (1 << k)) % n]
            src = p.addr(peer, "in", 0) if k == 0 else \
                p.bases[peer] + p.buf.flags + (k - 1) * FLAG_STRIDE
            dst = p.bases[ranks[r]] + p.buf.flags + k * FLAG_STRIDE
            p.move(ranks[r], "copy", src, dst, 1)
        for r in range(n):
            p.gate[ranks[r]] = p.moves[-n + r].id
    del eb


def plan_collective(c: Collective, bases: list[int], buf: Buffers,
                    tile_elems: int, barrier: bool = True) -> list[Move]:
    """The moves of collective `c`; `bases[chip]` is each chip's HBM base address. With
    `barrier`, an entry barrier over the ranks comes first."""
    p = _Planner(c, bases, buf, tile_elems)
    ranks = list(c.chips)
    n = len(ranks)
    if barrier and n > 1:
        _barrier(p, ranks)
    two = c.bidirectional and n > 2
    count = c.count
    if c.op == "send_recv":
        p.move(ranks[1], "copy", p.addr(ranks[0], "in", 0), p.addr(ranks[1], "out", 0), count)
    elif c.op == "all_to_all":
        _all_to_all(p, ranks, count)
    elif c.algorithm == "direct":
        if c.op in ("all_reduce", "reduce_scatter"):
            _direct_rs(p, ranks, count, dst_off=c.op == "reduce_scatter")
        if c.op == "all_reduce":
            _direct_ag(p, ranks, count, "out", src_off=False)
        elif c.op == "all_gather":
            _direct_ag(p, ranks, count, "in", src_off=True)
    elif c.algorithm == "2d":
        _two_d(p, c, ranks, two)
    else:
        region = (0, count)
        if c.op in ("all_reduce", "reduce_scatter"):
            _ring_rs(p, ranks, region, "in", "out", 0 if c.op == "reduce_scatter" else None, two)
        if c.op == "all_reduce":
            _ring_ag(p, ranks, region, "out", None, "out", two)
        elif c.op == "all_gather":
            _ring_ag(p, ranks, region, "in", 0, "out", two)
    return p.moves


def _two_d(p: _Planner, c: Collective, ranks: list[int], two: bool) -> None:
    """All-reduce on a rows × cols grid of ranks (row-major): row reduce-scatter into
    `out` (rank (r, col) holds row chunk col), ring all-reduce of that chunk along each
    column, in place in `out`, then row all-gather in `out`."""
    if c.op != "all_reduce" or c.grid is None:
        raise InputError(f"the 2d algorithm does all_reduce on a chip grid, not {c.op}",
                         field="algorithm")
    rows, cols = c.grid
    count = c.count
    row_chunks = _chunks(count, cols)
    for r in range(rows):
        _ring_rs(p, ranks[r * cols:(r + 1) * cols], (0, count), "in", "out", None, two and cols > 2)
    if rows > 1:
        for col in range(cols):
            column = [ranks[r * cols + col] for r in range(rows)]
            _ring_rs(p, column, row_chunks[col], "out", "out", None, two and rows > 2)
            _ring_ag(p, column, row_chunks[col], "out", None, "out", two and rows > 2)
    for r in range(rows):
        _ring_ag(p, ranks[r * cols:(r + 1) * cols], (0, count), "out", None, "out",
                 two and cols > 2)
