"""Draw a topology's cubes, router meshes, PEs, HBM ports and UCIe links as SVG."""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

from kernbench.topology.model import Topology


def mesh_svg(topo: Topology) -> str:
    mesh = topo.config.cube.mesh
    step = 90
    pad = 40
    cube_w = mesh.cols * step + pad
    cube_h = mesh.rows * step + pad
    grid = topo.config.sip.cubes
    W = grid.cols * (cube_w + pad) + pad
    H = topo.config.sip.count * grid.rows * (cube_h + pad) + pad + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="10">']
    pos: dict[str, tuple[float, float]] = {}
    for c in topo.cubes:
        ox = pad + c.col * (cube_w + pad)
        oy = pad + (c.sip * grid.rows + c.row) * (cube_h + pad)
        out.append(f'<rect x="{ox}" y="{oy}" width="{cube_w}" height="{cube_h}" fill="#f4f6fb" '
                   f'stroke="#888"/><text x="{ox + 4}" y="{oy - 4}">{escape(c.id)}</text>')
        for r in range(mesh.rows):
            for col in range(mesh.cols):
                x = ox + pad / 2 + col * step + step / 2
                y = oy + pad / 2 + r * step + step / 2
                pos[f"{c.id}.r{r}c{col}"] = (x, y)
    for link in topo.links.values():
        if link.kind in ("mesh", "ucie") and link.src < link.dst:
            (x1, y1), (x2, y2) = pos[link.src], pos[link.dst]
            color = "#c33" if link.kind == "ucie" else "#555"
            out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}" '
                       f'stroke-width="{3 if link.kind == "ucie" else 2}"/>')
    for rid, (x, y) in pos.items():
        out.append(f'<circle cx="{x}" cy="{y}" r="9" fill="#fff" stroke="#333"/>'
                   f'<text x="{x - 9}" y="{y + 22}">{escape(rid.rsplit(".", 1)[1])}</text>')
    for p in topo.pes:
        x, y = pos[p.router]
        out.append(f'<rect x="{x + 8}" y="{y - 26}" width="30" height="16" fill="#cfe3ff" '
                   f'stroke="#36c"/><text x="{x + 11}" y="{y - 14}">pe{p.local}</text>')
    out.append(f'<text x="{pad}" y="{H - 8}">{escape(topo.name)}: grey = mesh link, '
               f'red = UCIe, blue = PE; HBM is attached at '
               f'{escape(str(topo.config.cube.hbm_ctrl.attach))} routers</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_mesh_svg(topo: Topology, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(mesh_svg(topo), encoding="utf-8")
