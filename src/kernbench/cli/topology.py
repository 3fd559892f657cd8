"""`kernbench topology show [NAME|FILE] [--set k=v]... [--svg out.svg] [--json]`."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import SetOpt, err, preset_list
from kernbench.config.load import COMPUTED_KEY
from kernbench.topology import load_topology
from kernbench.topology.area import area_report

topology_app = typer.Typer(help="Inspect NPU topologies.", no_args_is_help=True)
app.add_typer(topology_app, name="topology")


@topology_app.command("show")
def show(
    source: Annotated[str, typer.Argument(help=f"preset name ({preset_list()}) or YAML file")] = "small",
    set_: SetOpt = None,
    svg: Annotated[Path | None, typer.Option(
        "--svg", help="also draw the mesh (of a many-chip system: the chips) to this SVG")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="print the whole resolved topology config (timing, energy and area "
                       "parameters) as JSON on stdout, with the computed peaks and die area "
                       "under 'computed'; it loads back as a topology file")] = False,
) -> None:
    """Print the component tree, links and die area of a topology, then one line of its peaks
    (dense TOPS by precision, HBM bandwidth and capacity); a many-chip system first draws its
    chips and expands chip 0 only. With --json, the resolved configuration and the same
    computed figures."""
    from rich.tree import Tree

    topo = load_topology(source, set_ or [])
    cfg = topo.config
    area = area_report(topo)
    if as_json:
        doc = cfg.model_dump(mode="json")
        doc[COMPUTED_KEY] = computed_figures(topo, area)
        sys.stdout.write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        return
    root = Tree(f"[bold]{topo.name}[/]: {cfg.sip.count} SIP × {len(topo.cubes) // cfg.sip.count} "
                f"cube(s), {len(topo.pes)} PEs, HBM {topo.hbm_bytes / 2**30:g} GiB, "
                f"die area {area.total:.2f} mm²")
    pt = cfg.cube.pe_template
    _add_system(root, topo)
    for cube in topo.cubes:
        if cfg.system is not None and cube.sip > 0:
            if cube.sip == 1 and cube.index % (len(topo.cubes) // cfg.system.chips) == 0:
                root.add(f"chips 1..{cfg.system.chips - 1}: as chip 0 (sip<N>.cube<M>...)")
            continue
        c = root.add(f"[bold]{cube.id}[/] mesh {cfg.cube.mesh.rows}×{cfg.cube.mesh.cols}, "
                     f"HBM [{cube.hbm_base:#x}, {cube.hbm_base + cube.hbm_bytes:#x}), "
                     f"area {area.by_cube[cube.id]:.2f} mm²")
        for nid, node in topo.nodes.items():
            if node.cube == cube.id and ".pe" not in nid[len(cube.id):]:
                c.add(f"{nid.split('.')[-1]}  [dim]{node.kind}/{node.impl}[/]")
        for p in [p for p in topo.pes if p.cube is cube]:
            pn = c.add(f"{p.id} @ {p.router.split('.')[-1]}")
            if p.local == 0 or len(topo.pes) <= 8:
                for name in ("pe_cpu", "pe_scheduler", "pe_dma", "pe_fetch_store", "pe_gemm",
                             "pe_math", "pe_tcm", "pe_mmu"):
                    spec = getattr(pt, name)
                    pn.add(f"{name}  [dim]{spec.impl}  {_brief(name, spec)}[/]")
    kinds = Counter(link.kind for link in topo.links.values())
    links = root.add(f"links: {len(topo.links)} directed ("
                     + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")")
    seen = set()
    for link in topo.links.values():
        if link.kind not in seen:
            seen.add(link.kind)
            links.add(f"{link.kind}: e.g. {link.id}  {link.latency_ns:g} ns, {link.bw_gbs:g} GB/s")
    kinds_area = root.add("area by component kind (mm², docs/energy.md)")
    for kind, mm2 in sorted(area.by_kind.items(), key=lambda kv: (-kv[1], kv[0])):
        kinds_area.add(f"{kind}: {mm2:.3f}")
    from rich.console import Console

    from kernbench.topology.peaks import peak_figures

    Console(highlight=False).print(root)
    print(peak_figures(topo).line())
    if svg is not None and cfg.system is not None:
        from kernbench.report.chips_draw import write_chips_svg

        write_chips_svg(topo, svg)
        err.print(f"wrote {svg}")
    elif svg is not None:
        from kernbench.report.mesh_svg import write_mesh_svg

        write_mesh_svg(topo, svg)
        err.print(f"wrote {svg}")


def _add_system(root, topo) -> None:  # noqa: ANN001
    """The chips of a many-chip system (its arrangement and links, then the chip grid)."""
    if topo.config.system is None:
        return
    from rich.markup import escape

    from kernbench.report.chips_draw import chip_grid_text, system_line

    chips = root.add(escape(system_line(topo)))
    for line in chip_grid_text(topo):
        chips.add(escape(line))


def _brief(name: str, spec) -> str:  # noqa: ANN001
    if name == "pe_gemm":
        return f"{spec.rows}×{spec.cols} {spec.dataflow} @ {spec.clock_ghz:g} GHz"
    if name == "pe_math":
        return f"{spec.lanes} lanes"
    if name == "pe_tcm":
        return (f"{spec.capacity_kib} KiB / {spec.banks} banks, {spec.bw_gbs:g} GB/s, "
                f"reserved {spec.reserved_kib} KiB")
    if name == "pe_dma":
        cap = spec.hbm_read_bytes_per_cycle
        return (f"burst {spec.burst_bytes} B, 1 read + 1 write channel"
                + ("" if cap is None else f", DRAM read ≤ {cap:g} B/cyc"))
    return ""


def computed_figures(topo, area) -> dict:  # noqa: ANN001
    """The figures the text form prints that the config does not hold: peaks (dense TOPS
    by precision, MACs per ns by operand bits, vector rate, HBM bandwidth and capacity, PE
    and cube counts) and die area (mm², by kind, cube and SIP)."""
    from kernbench.topology.chips import neighbour_pairs
    from kernbench.topology.peaks import peak_figures

    p = peak_figures(topo)
    extra: dict = {}
    if topo.config.system is not None:
        s = topo.config.system
        extra["system"] = {"chips": s.chips, "grid": list(s.grid),
                           "neighbour_pairs": [list(pr) for pr in neighbour_pairs(s)],
                           "chip_links_directed": sum(1 for lk in topo.links.values()
                                                      if lk.kind == "chip_link")}
    return {**extra, "peaks": {"tops": dict(p.tops),
                      "macs_per_ns": {str(b): v for b, v in sorted(p.macs_per_ns.items())},
                      "vector_elems_per_ns": p.vector_elems_per_ns, "hbm_gbs": p.hbm_gbs,
                      "hbm_bytes": p.hbm_bytes, "pes": p.pes, "cubes": p.cubes},
            "area_mm2": area.to_json()}
