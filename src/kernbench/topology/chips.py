"""Chip-level geometry of a `system:` section: where each chip sits, which chip pairs are
neighbours, and the dimension-ordered route between two chips.

A line is a 1 × N mesh, a ring a 1 × N torus; mesh2d / torus2d are rows × cols. Chip `i`
sits at (i // cols, i % cols). Routes move along the row first (columns), then along the
column (rows), like the on-chip XY routing; on a wrap-around axis a route goes the shorter
way round, the increasing direction on a tie. Nothing here depends on the chips' insides.
"""

from __future__ import annotations

from kernbench.config.schema import SystemSpec


def chip_at(system: SystemSpec, chip: int) -> tuple[int, int]:
    """(row, col) of chip `chip` in the chip grid."""
    _, cols = system.grid
    return divmod(chip, cols)


def neighbour_pairs(system: SystemSpec) -> list[tuple[int, int]]:
    """Every pair of chips joined by links, (a, b) with a < b, in chip order; a 2-chip
    ring axis has one pair, not two."""
    rows, cols = system.grid
    pairs: set[tuple[int, int]] = set()
    for r in range(rows):
        for c in range(cols):
            here = r * cols + c
            for nr, nc in ((r, c + 1), (r + 1, c)):
                if system.wraps:
                    nr, nc = nr % rows, nc % cols
                if nr < rows and nc < cols:
                    there = nr * cols + nc
                    if there != here:
                        pairs.add((min(here, there), max(here, there)))
    return sorted(pairs)


def _step(cur: int, dst: int, size: int, wraps: bool) -> int:
    """The next coordinate from `cur` towards `dst` on an axis of `size`."""
    if not wraps:
        return cur + (1 if dst > cur else -1)
    fwd = (dst - cur) % size
    return (cur + 1) % size if fwd <= size - fwd else (cur - 1) % size


def chip_route(system: SystemSpec, src: int, dst: int) -> list[tuple[int, int]]:
    """The chip hops (from, to) from chip `src` to chip `dst`: columns first, then rows."""
    rows, cols = system.grid
    (r, c), (dr, dc) = chip_at(system, src), chip_at(system, dst)
    hops: list[tuple[int, int]] = []
    while c != dc:
        nc = _step(c, dc, cols, system.wraps)
        hops.append((r * cols + c, r * cols + nc))
        c = nc
    while r != dr:
        nr = _step(r, dr, rows, system.wraps)
        hops.append((r * cols + c, nr * cols + c))
        r = nr
    return hops


def ring_order(system: SystemSpec) -> list[int]:
    """The chips in an order where each is a neighbour of the next and the last of the
    first (a Hamiltonian cycle), or in a line order when the arrangement has no cycle
    through every chip (a line, or a mesh with an odd number of chips on both axes)."""
    rows, cols = system.grid
    if rows == 1 or cols == 1:
        return list(range(system.chips))
    if rows % 2 and cols % 2 and not system.wraps:
        return [r * cols + (c if r % 2 == 0 else cols - 1 - c)
                for r in range(rows) for c in range(cols)]
    if rows % 2 == 0:
        # down column 0, then snake through columns 1.. upwards
        order = [r * cols for r in range(rows)]
        for i, r in enumerate(reversed(range(rows))):
            cs = range(1, cols) if i % 2 == 0 else reversed(range(1, cols))
            order += [r * cols + c for c in cs]
        return order
    order = list(range(cols))
    for i, c in enumerate(reversed(range(cols))):
        rs = range(1, rows) if i % 2 == 0 else reversed(range(1, rows))
        order += [r * cols + c for r in rs]
    return order


def is_cycle(system: SystemSpec, order: list[int]) -> bool:
    """Whether consecutive chips of `order` (and the last and first) are neighbours."""
    pairs = set(neighbour_pairs(system))
    n = len(order)
    return n > 1 and all((min(order[i], order[(i + 1) % n]), max(order[i], order[(i + 1) % n]))
                         in pairs for i in range(n))
