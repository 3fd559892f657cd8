"""Lower a collective's tile moves to CMDQ entries: one program for the whole
system, each entry on a PE of the chip that runs its move (global PE index).

A move runs on a worker PE of its chip: a `copy` is DMA_LOAD_TILE (source → TCM slot)
then DMA_STORE_TILE (slot → destination); a `reduce` loads both operands into two slots,
adds them with VE_ELEMENTWISE_TILE and stores the sum. A source on another chip is an HBM
address on that chip, so its load crosses the chip links. Workers are the first
`workers` PEs of each chip whose chip-link lane (`Topology.lane_of`) is below `links`, so
a collective uses `links` of the parallel links of each neighbour pair. Each worker cycles
through TCM slot sets; a slot's next loads wait for its previous store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernbench.cmdq.limits import CmdqLimits
from kernbench.compiler.collectives.plan import (
    DTYPE_BYTES,
    Buffers,
    Collective,
    Move,
    plan_collective,
)
from kernbench.errors import InputError
from kernbench.topology.model import Topology


@dataclass(frozen=True)
class CollectiveProgram:
    """The CMDQ document of a collective, its moves and where its buffers are."""

    doc: dict[str, Any]
    moves: list[Move]
    buffers: Buffers
    bases: list[int]          # HBM base address of each chip
    tile_elems: int


def chip_bases(topo: Topology) -> list[int]:
    """The HBM base address of each chip (its first cube's)."""
    per_chip = len(topo.cubes) // topo.chips
    return [topo.cubes[c * per_chip].hbm_base for c in range(topo.chips)]


def _workers(topo: Topology, chip: int, workers: int, links: int) -> list[int]:
    per_chip = len(topo.pes) // topo.chips
    pes = [topo.pes[chip * per_chip + i] for i in range(per_chip)]
    chosen = [p.index for p in pes if topo.lane_of(p) < links][:workers]
    return chosen or [pes[0].index]


def _check(c: Collective, topo: Topology, buf: Buffers, links: int) -> None:
    """Bad input: one line naming the value."""
    if any(ch < 0 or ch >= topo.chips for ch in c.chips):
        bad = next(ch for ch in c.chips if ch < 0 or ch >= topo.chips)
        raise InputError(f"chip {bad} is not in the topology '{topo.name}' "
                         f"({topo.chips} chip(s))", field="chips")
    if len(set(c.chips)) != len(c.chips):
        raise InputError(f"chips {list(c.chips)} name a chip twice", field="chips")
    need = 2 if c.op == "send_recv" else 1
    if len(c.chips) < need or (c.op == "send_recv" and len(c.chips) != 2):
        raise InputError(f"{c.op} needs {'exactly 2' if c.op == 'send_recv' else 'a'} "
                         f"chip(s), got {len(c.chips)}", field="chips")
    if c.dtype not in DTYPE_BYTES:
        raise InputError(f"dtype {c.dtype!r} is not one of {', '.join(DTYPE_BYTES)}",
                         field="dtype")
    if c.count < len(c.chips) or c.count % len(c.chips):
        raise InputError(f"count {c.count} elements does not split into {len(c.chips)} "
                         "equal chunks (one per rank)", field="count")
    if c.algorithm == "2d" and (c.grid is None or c.grid[0] * c.grid[1] != len(c.chips)):
        raise InputError(f"the 2d algorithm needs a chip grid of {len(c.chips)} chips, "
                         f"got {c.grid}", field="algorithm")
    per_chip_hbm = topo.hbm_bytes // topo.chips
    end = max(buf.inp, buf.out) + c.count * c.elem_bytes
    end = max(end, buf.scratch + 2 * c.count * c.elem_bytes, buf.flags + 4096)
    if end > per_chip_hbm:
        raise InputError(f"{c.op} of {c.count * c.elem_bytes} bytes per chip needs "
                         f"{end} bytes of HBM per chip (input, output, 2 × scratch, flags); "
                         f"'{topo.name}' has {per_chip_hbm}", field="bytes")
    if links < 1:
        raise InputError(f"links {links} must be at least 1", field="links")
    system = topo.config.system
    have = system.link.links_per_pair if system is not None else 1
    if links > have:
        raise InputError(f"links {links}: '{topo.name}' joins each neighbour pair with "
                         f"{have} link(s)", field="links")


def default_buffers(c: Collective) -> Buffers:
    """in at 0, out after it, scratch (2 × count) after that, then the barrier flags,
    each 4 KiB aligned."""
    n = -(-c.count * c.elem_bytes // 4096) * 4096
    return Buffers(inp=0, out=n, scratch=2 * n, flags=4 * n)


#: the smallest tile a chunk is cut into (bytes): below it DMA set-up dominates
MIN_TILE_BYTES = 1024


def _tile_elems(c: Collective, max_bytes: int, workers: int) -> int:
    """Elements per tile: a step moves one chunk (count / ranks) into each chip, in two
    halves when bidirectional; it is cut in `workers` tiles so every worker has one tile
    per step, within [MIN_TILE_BYTES, max_bytes]."""
    eb = c.elem_bytes
    n = len(c.chips)
    chunk = -(-c.count // n)
    want = -(-chunk // max(1, workers))
    lo, hi = max(1, MIN_TILE_BYTES // eb), max(1, max_bytes // eb)
    return max(min(want, hi), min(lo, hi))


def lower_collective(c: Collective, topo: Topology, limits: CmdqLimits, *,
                     tile_bytes: int = 65536, workers: int = 8, links: int = 1,
                     buffers: Buffers | None = None, barrier: bool = True,
                     first_id: int = 0, after: dict[int, list[int]] | None = None,
                     end: bool = True) -> CollectiveProgram:
    """The CMDQ program of collective `c` on `topo` (see the module docstring).

    To place it inside a larger program (a compiler's): entry ids start at `first_id`;
    `after[chip]` lists entries (of the enclosing program) that produce the chip's input,
    and every move waits for those of its own chip and of the chips it reads from; `end`
    False leaves out the closing END."""
    buf = buffers or default_buffers(c)
    _check(c, topo, buf, links)
    eb = c.elem_bytes
    bank = limits.tcm_bank_bytes
    tcm = topo.config.cube.pe_template.pe_tcm
    usable = limits.tcm_banks - (tcm.reserved_kib * 1024) // bank
    if usable < 3:
        raise InputError(f"a collective needs 3 free TCM banks per PE; '{topo.name}' has "
                         f"{usable}", field="tcm")
    tile = _tile_elems(c, min(tile_bytes, bank), workers)
    moves = plan_collective(c, chip_bases(topo), buf, tile, barrier)
    slots = [(g * 3, i * tile * eb) for g in range(usable // 3)
             for i in range(bank // (tile * eb))]
    entries = _emit(moves, topo, c, slots, workers, links, first_id, after or {})
    if end:
        entries.append({"opcode": "END", "id": first_id + len(entries)})
    return CollectiveProgram({"cmdq": entries}, moves, buf, chip_bases(topo), tile)


def issue_order(moves: list[Move]) -> list[Move]:
    """The moves in the order their entries are emitted: by dependency depth, and within a
    depth one move of each chip in turn: each chip's command processor fetches its own
    chip's entries in this order, so a step's moves enter its issue window
    together."""
    depth: dict[int, int] = {}
    for m in moves:  # deps always have smaller ids
        depth[m.id] = 1 + max((depth[d] for d in m.deps), default=0)
    turn: dict[tuple[int, int], int] = {}
    key: dict[int, tuple[int, int, int]] = {}
    for m in moves:
        k = (depth[m.id], m.chip)
        key[m.id] = (depth[m.id], turn.get(k, 0), m.chip)
        turn[k] = turn.get(k, 0) + 1
    return sorted(moves, key=lambda m: key[m.id])


def _emit(moves: list[Move], topo: Topology, c: Collective,
          slots: list[tuple[int, int]], workers: int, links: int, first_id: int,
          waits: dict[int, list[int]]) -> list[dict[str, Any]]:
    qbits = c.elem_bytes * 8
    entries: list[dict[str, Any]] = []
    final: dict[int, int] = {}                 # move id → its store's entry id
    turn: dict[int, int] = {}                  # chip → next worker turn
    slot_free: dict[tuple[int, int], int] = {}  # (pe, slot) → entry that last read it
    pools = {ch: _workers(topo, ch, workers, links) for ch in sorted({m.chip for m in moves})}
    layer = f"{c.op}.{c.algorithm}"

    per_chip_hbm = topo.hbm_bytes // topo.chips

    def add(e: dict[str, Any]) -> int:
        e["id"] = first_id + len(entries)
        e["layer_id"] = layer
        entries.append(e)
        return e["id"]

    for m in issue_order(moves):
        pool = pools[m.chip]
        t = turn.get(m.chip, 0)
        turn[m.chip] = t + 1
        pe = pool[t % len(pool)]
        si = (t // len(pool)) % len(slots)
        g, off = slots[si]
        deps_set = {final[d] for d in m.deps}
        if (pe, si) in slot_free:
            deps_set.add(slot_free[(pe, si)])
        for ch in {m.chip, m.src // per_chip_hbm,
                   (m.src2 if m.src2 is not None else m.src) // per_chip_hbm}:
            deps_set.update(waits.get(ch, ()))
        deps = sorted(deps_set)

        def load(addr: int, bank: int) -> int:
            return add({"opcode": "DMA_LOAD_TILE", "pe": pe, "qbits": qbits,  # noqa: B023
                        "dram_addr": addr, "spm_bank": bank, "spm_offset": off,  # noqa: B023
                        "num_elements": m.n, "deps_before": deps})  # noqa: B023

        a = load(m.src, g)
        if m.kind == "copy":
            src_bank, after = g, [a]
        else:
            assert m.src2 is not None
            b = load(m.src2, g + 1)
            v = add({"opcode": "VE_ELEMENTWISE_TILE", "pe": pe, "op": "add", "cost": "add",
                     "in_bank": g, "in_offset": off, "in_shape": [m.n], "in_dtype": c.dtype,
                     "in2_bank": g + 1, "in2_offset": off, "in2_shape": [m.n],
                     "in2_dtype": c.dtype, "out_bank": g + 2, "out_offset": off,
                     "out_shape": [m.n], "out_dtype": c.dtype, "deps_before": [a, b]})
            src_bank, after = g + 2, [v]
        st = add({"opcode": "DMA_STORE_TILE", "pe": pe, "qbits": qbits, "dram_addr": m.dst,
                  "spm_bank": src_bank, "spm_offset": off, "num_elements": m.n,
                  "deps_before": after})
        final[m.id] = st
        slot_free[(pe, si)] = st
    return entries
