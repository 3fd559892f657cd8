"""Draw the chips of a many-chip topology (its `system:` section): a text grid for the
terminal and an SVG, each chip a box, each neighbour pair a line labelled with its links."""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

from kernbench.topology.chips import neighbour_pairs
from kernbench.topology.model import Topology


def system_line(topo: Topology) -> str:
    """One line: chips, arrangement, grid and the links of each neighbour pair."""
    s = topo.config.system
    assert s is not None
    rows, cols = s.grid
    lk = s.link
    return (f"system: {s.chips} chips, {s.arrangement} {rows}×{cols}; each neighbour pair: "
            f"{lk.links_per_pair} × {lk.impl} link(s), {lk.bw_gbs:g} GB/s per direction each, "
            f"{lk.latency_ns:g} ns; attached at cube{lk.cube}.{lk.router}")


def chip_grid_text(topo: Topology) -> list[str]:
    """The chip grid as text lines: `chip3` boxes joined by `==` (row) and `||` (column)
    links; wrap-around links of a ring / torus are listed under the grid."""
    s = topo.config.system
    assert s is not None
    rows, cols = s.grid
    pairs = set(neighbour_pairs(s))
    w = max(len(f"chip{s.chips - 1}"), 5)
    lines: list[str] = []
    for r in range(rows):
        row = ""
        for c in range(cols):
            i = r * cols + c
            row += f"[{f'chip{i}':^{w}}]"
            if c + 1 < cols:
                row += " == " if (i, i + 1) in pairs else "    "
        lines.append(row)
        if r + 1 < rows:
            lines.append("".join(f"{'||':^{w + 2}}" + ("    " if c + 1 < cols else "")
                                 for c in range(cols)))
    wraps = [(a, b) for a, b in sorted(pairs)
             if not (b == a + 1 and a // cols == b // cols) and b != a + cols]
    if wraps:
        lines.append("wrap-around: " + ", ".join(f"chip{a}-chip{b}" for a, b in wraps))
    return lines


def chips_svg(topo: Topology) -> str:
    """An SVG of the chip grid: boxes named by chip with their PE count, lines for the
    neighbour pairs (curved for wrap-around links) labelled with links × GB/s."""
    s = topo.config.system
    assert s is not None
    rows, cols = s.grid
    box, gap, pad = 120, 80, 40
    W = cols * box + (cols - 1) * gap + 2 * pad
    H = rows * box + (rows - 1) * gap + 2 * pad + 30
    per_chip = len(topo.pes) // s.chips

    def centre(i: int) -> tuple[float, float]:
        r, c = divmod(i, cols)
        return pad + c * (box + gap) + box / 2, pad + r * (box + gap) + box / 2

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="11">']
    label = f"{s.link.links_per_pair}×{s.link.bw_gbs:g} GB/s"
    for a, b in neighbour_pairs(s):
        (x1, y1), (x2, y2) = centre(a), centre(b)
        adjacent = (b == a + 1 and a // cols == b // cols) or b == a + cols
        if adjacent:
            out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#c33" '
                       f'stroke-width="3"/>')
        else:  # a wrap-around link bows out of the grid
            mx, my = (x1 + x2) / 2, (y1 + y2) / 2
            bow = -(box * 0.9) if y1 == y2 else box * 0.9
            cx, cy = (mx, my + bow) if y1 == y2 else (mx + bow, my)
            out.append(f'<path d="M{x1},{y1} Q{cx},{cy} {x2},{y2}" fill="none" '
                       f'stroke="#c33" stroke-width="2" stroke-dasharray="6,3"/>')
        out.append(f'<text x="{(x1 + x2) / 2 + 4}" y="{(y1 + y2) / 2 - 4}">{escape(label)}</text>')
    for i in range(s.chips):
        x, y = centre(i)
        out.append(f'<rect x="{x - box / 2}" y="{y - box / 2}" width="{box}" height="{box}" '
                   f'fill="#f4f6fb" stroke="#333"/>'
                   f'<text x="{x - 20}" y="{y - 4}" font-size="14">chip{i}</text>'
                   f'<text x="{x - 30}" y="{y + 14}">{per_chip} PEs</text>')
    out.append(f'<text x="{pad}" y="{H - 10}">{escape(system_line(topo))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_chips_svg(topo: Topology, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(chips_svg(topo), encoding="utf-8")
