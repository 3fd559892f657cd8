"""All-to-all with per-pair sizes (all-to-all-v), as used by expert parallelism's
dispatch and combine (docs/multichip.md).

Rank s sends `splits[s][d]` elements to rank d. Rank s's send buffer holds its blocks for
d = 0, 1, … back to back; rank d's receive buffer holds the blocks from s = 0, 1, … back to
back. The ranks' buffers may sit at different offsets of their chips' HBM (each rank's
program has its own memory plan): `src[r]` / `dst[r]` are global HBM byte addresses.

The moves are direct pulls, as for the equal-chunk all_to_all (`plan._all_to_all`): rank d
copies block (s, d) from rank s's send buffer into its receive buffer, its own block
included (a local copy), after the usual entry barrier. A pair with nothing to send has
no move; every byte a move carries between chips crosses the chip links once, so the
links carry exactly Σ_{s≠d} splits[s][d] × element bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernbench.cmdq.limits import CmdqLimits
from kernbench.compiler.collectives.lower import (
    MIN_TILE_BYTES,
    _emit,
    chip_bases,
)
from kernbench.compiler.collectives.plan import (
    DTYPE_BYTES,
    FLAG_STRIDE,
    Buffers,
    Collective,
    Move,
    _Planner,
    barrier_rounds,
)
from kernbench.errors import InputError
from kernbench.topology.model import Topology


def _barrier(p: _Planner, ranks: list[int], first: list[int]) -> None:
    """`plan._barrier` with round 0 reading the first element of each rank's send buffer
    (`first[r]`, a global address: the ranks' buffers sit at other offsets)."""
    n = len(ranks)
    for k in range(barrier_rounds(n)):
        for r in range(n):
            q = (r - (1 << k)) % n
            src = first[q] if k == 0 else p.bases[ranks[q]] + p.buf.flags + (k - 1) * FLAG_STRIDE
            p.move(ranks[r], "copy", src, p.bases[ranks[r]] + p.buf.flags + k * FLAG_STRIDE, 1)
        for r in range(n):
            p.gate[ranks[r]] = p.moves[-n + r].id


def link_elements(splits: Sequence[Sequence[int]]) -> int:
    """Elements that cross between chips: every off-diagonal block once."""
    return sum(v for s, row in enumerate(splits) for d, v in enumerate(row) if s != d)


def plan_all_to_all_v(splits: Sequence[Sequence[int]], chips: Sequence[int],
                      bases: list[int], src: Sequence[int], dst: Sequence[int],
                      flags: int, dtype: str, tile_elems: int,
                      broadcast: bool = False) -> list[Move]:
    """The moves (module docstring); `flags` is the barrier flags' offset from each
    chip's HBM base (the same on every chip). With `broadcast` every block a rank sends
    is its whole send buffer (an all-gather: `splits[s][q]` the same for every q)."""
    n = len(chips)
    c = Collective("all_to_all", max(1, n), tuple(chips), "direct", dtype)
    p = _Planner(c, bases, Buffers(inp=0, out=0, scratch=flags, flags=flags), tile_elems)
    if n > 1:
        _barrier(p, list(chips), [src[r] for r in range(n)])
    eb = DTYPE_BYTES[dtype]
    for d in range(n):
        for i in range(n):
            s = (d + i) % n
            k = splits[s][d]
            if not k:
                continue
            s_off = 0 if broadcast else sum(splits[s][:d])
            d_off = sum(splits[q][d] for q in range(s))
            p.move(chips[d], "copy", src[s] + s_off * eb, dst[d] + d_off * eb, k)
    return p.moves


def lower_all_to_all_v(splits: Sequence[Sequence[int]], chips: Sequence[int],
                       topo: Topology, limits: CmdqLimits, *, src: Sequence[int],
                       dst: Sequence[int], flags: int, dtype: str, first_id: int,
                       after: dict[int, list[int]], tile_bytes: int = 65536,
                       workers: int = 8, broadcast: bool = False) -> list[dict[str, Any]]:
    """The CMDQ entries of an all-to-all-v (ids from `first_id`, no END); `after[chip]`
    lists the enclosing program's entries a move on or from that chip waits for."""
    n = len(chips)
    if len(splits) != n or any(len(r) != n for r in splits):
        raise ValueError(f"splits must be {n} × {n}")
    if dtype not in DTYPE_BYTES:
        raise InputError(f"an all-to-all moves bf16, fp16 or fp32, not {dtype}", field="dtype")
    eb = DTYPE_BYTES[dtype]
    bank = limits.tcm_bank_bytes
    tcm = topo.config.cube.pe_template.pe_tcm
    usable = limits.tcm_banks - (tcm.reserved_kib * 1024) // bank
    if usable < 3:
        raise InputError(f"a collective needs 3 free TCM banks per PE; '{topo.name}' has "
                         f"{usable}", field="tcm")
    biggest = max((v for row in splits for v in row), default=1)
    want = -(-biggest // max(1, workers))
    lo, hi = max(1, MIN_TILE_BYTES // eb), max(1, min(tile_bytes, bank) // eb)
    burst = max(1, 64 // eb)   # whole 64-byte bursts: the wire carries the payload
    tile = max(min(-(-want // burst) * burst, hi), min(lo, hi))
    moves = plan_all_to_all_v(splits, chips, chip_bases(topo), src, dst, flags, dtype, tile,
                              broadcast)
    slots = [(g * 3, i * tile * eb) for g in range(usable // 3)
             for i in range(bank // (tile * eb))]
    c = Collective("all_to_all", max(1, n), tuple(chips), "direct", dtype)
    return _emit(moves, topo, c, slots, workers, 1, first_id, after)
