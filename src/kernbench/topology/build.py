"""Expand a TopologyConfig into a Topology (nodes, links, wires, cubes, PEs, address map).

This is the one place that names nodes and connects them: every component port the
hardware uses is wired here (`Topology.wires`), so a component never formats a peer's id.
"""

from __future__ import annotations

from kernbench.config.schema import CubeSpec, TopologyConfig
from kernbench.topology.chips import neighbour_pairs
from kernbench.topology.model import (
    PE_COMPONENTS,
    Cube,
    LinkSpec,
    Node,
    Pe,
    Topology,
    Wire,
    channel_endpoint,
    chip_link_id,
    chip_port,
)

GIB = 1 << 30

#: PE-internal wiring: (component, port, peer component); gemm / math are vector ports
#: with one peer per engine instance (te_id / ve_id order).
PE_WIRES: tuple[tuple[str, str, str], ...] = (
    ("pe_cpu", "scheduler", "pe_scheduler"),
    ("pe_scheduler", "dma", "pe_dma"),
    ("pe_scheduler", "fetch_store", "pe_fetch_store"),
    ("pe_scheduler", "gemm", "pe_gemm"),
    ("pe_scheduler", "math", "pe_math"),
    ("pe_scheduler", "tcm", "pe_tcm"),
    ("pe_dma", "tcm", "pe_tcm"),
    ("pe_dma", "mmu", "pe_mmu"),
    ("pe_fetch_store", "tcm", "pe_tcm"),
)


class _Builder:
    """Accumulates nodes, links and wires into one Topology."""

    def __init__(self, cfg: TopologyConfig) -> None:
        self.cfg = cfg
        self.topo = Topology(config=cfg)

    def node(self, nid: str, spec, cube: Cube, pe: str = "") -> None:  # noqa: ANN001
        self.topo.nodes[nid] = Node(nid, spec.kind, spec.impl, spec, cube.id, pe)

    def link(self, src: str, dst: str, lat: float, bw: float, kind: str) -> None:
        lid = f"{src}->{dst}"
        self.topo.links[lid] = LinkSpec(lid, src, dst, lat, bw, kind)

    def duplex(self, a: str, b: str, lat: float, bw: float, kind: str) -> None:
        self.link(a, b, lat, bw, kind)
        self.link(b, a, lat, bw, kind)

    def wire(self, src: str, port: str, dst: str) -> None:
        self.topo.wires.append(Wire(src, port, dst))


def build_topology(cfg: TopologyConfig) -> Topology:
    """Nodes, links and wires of `cfg`: cubes in address-map order, PEs in global order."""
    b = _Builder(cfg)
    _cubes(b)
    pe_index = 0
    for cube in b.topo.cubes:
        _mesh(b, cube)
        _memories(b, cube)
        for local, rname in enumerate(cfg.cube.pe_layout):
            _pe(b, cube, local, pe_index, f"{cube.id}.{rname}")
            pe_index += 1
    for cube in b.topo.cubes:  # a cube's M_CPU may command any PE of the system
        for pe in b.topo.pes:
            b.wire(cube.m_cpu, "pe_cpus", pe.cpu)
    _ucie(b)
    _chip_links(b)
    return b.topo


def _cubes(b: _Builder) -> None:
    cfg = b.cfg
    cs = cfg.cube
    hbm_bytes = int(cs.hbm_ctrl.capacity_gib * GIB)
    sram_bytes = cs.shared_sram.capacity_kib * 1024 if cs.shared_sram else 0
    index = 0
    for s in range(cfg.sip.count):
        for r in range(cfg.sip.cubes.rows):
            for c in range(cfg.sip.cubes.cols):
                cid = f"sip{s}.cube{r * cfg.sip.cubes.cols + c}"
                sram = f"{cid}.shared_sram" if cs.shared_sram else ""
                sram_router = f"{cid}.{cs.shared_sram.router}" if cs.shared_sram else ""
                b.topo.cubes.append(
                    Cube(cid, index, s, r, c, index * hbm_bytes, hbm_bytes,
                         index * sram_bytes, sram_bytes, m_cpu=f"{cid}.m_cpu",
                         m_cpu_router=f"{cid}.{cs.m_cpu.router}", hbm_ctrl=f"{cid}.hbm_ctrl",
                         sram=sram, sram_router=sram_router)
                )
                index += 1


def _mesh(b: _Builder, cube: Cube) -> None:
    cs: CubeSpec = b.cfg.cube
    mesh = cs.mesh
    for r in range(mesh.rows):
        for c in range(mesh.cols):
            b.node(f"{cube.id}.r{r}c{c}", cs.router, cube)
    for r in range(mesh.rows):
        for c in range(mesh.cols):
            here = f"{cube.id}.r{r}c{c}"
            for nr, nc in ((r, c + 1), (r + 1, c)):
                if nr < mesh.rows and nc < mesh.cols:
                    b.duplex(here, f"{cube.id}.r{nr}c{nc}", cs.router.hop_latency_ns,
                             cs.router.link_bw_gbs, "mesh")


def _memories(b: _Builder, cube: Cube) -> None:
    """HBM controller, shared SRAM and M_CPU of a cube, with their router ports."""
    cs: CubeSpec = b.cfg.cube
    mesh = cs.mesh
    b.node(cube.hbm_ctrl, cs.hbm_ctrl, cube)
    attach = (
        [f"r{r}c{c}" for r in range(mesh.rows) for c in range(mesh.cols)]
        if cs.hbm_ctrl.attach == "all"
        else list(cs.hbm_ctrl.attach)
    )
    for name in attach:
        rid = f"{cube.id}.{name}"
        b.link(rid, cube.hbm_ctrl, cs.hbm_ctrl.port_latency_ns, cs.hbm_ctrl.port_bw_gbs,
               "hbm_port")
        b.link(cube.hbm_ctrl, rid, cs.hbm_ctrl.port_latency_ns, cs.hbm_ctrl.port_bw_gbs,
               "hbm_port")
    for i, name in enumerate(cs.hbm_ctrl.channel_routers or ()):
        rid, ch = f"{cube.id}.{name}", channel_endpoint(cube, i)
        b.link(rid, ch, cs.hbm_ctrl.port_latency_ns, cs.hbm_ctrl.port_bw_gbs, "hbm_port")
        b.link(ch, rid, cs.hbm_ctrl.port_latency_ns, cs.hbm_ctrl.port_bw_gbs, "hbm_port")
    if cs.shared_sram is not None:
        b.node(cube.sram, cs.shared_sram, cube)
        b.link(cube.sram_router, cube.sram, cs.shared_sram.latency_ns, cs.shared_sram.bw_gbs,
               "sram_port")
        b.link(cube.sram, cube.sram_router, cs.shared_sram.latency_ns, cs.shared_sram.bw_gbs,
               "sram_port")
    b.node(cube.m_cpu, cs.m_cpu, cube)
    b.duplex(cube.m_cpu, cube.m_cpu_router, cs.links.pe_router_latency_ns,
             cs.links.pe_router_bw_gbs, "pe")


def _pe(b: _Builder, cube: Cube, local: int, index: int, rid: str) -> None:
    """One PE: its engines (extra te_id / ve_id instances too), its wires and router link."""
    cs: CubeSpec = b.cfg.cube
    pid = f"{cube.id}.pe{local}"
    b.topo.pes.append(Pe(pid, index, cube, local, rid, cpu=f"{pid}.pe_cpu",
                         tcm=f"{pid}.pe_tcm"))
    instances: dict[str, list[str]] = {}
    for comp in PE_COMPONENTS:
        spec = getattr(cs.pe_template, comp)
        ids = [f"{pid}.{comp}"] + [f"{pid}.{comp}{extra}"
                                   for extra in range(1, getattr(spec, "count", 1))]
        for nid in ids:
            b.node(nid, spec, cube, pid)
        instances[comp] = ids
    for src, port, dst in PE_WIRES:
        for peer in instances[dst]:
            b.wire(instances[src][0], port, peer)
    b.duplex(pid, rid, cs.links.pe_router_latency_ns, cs.links.pe_router_bw_gbs, "pe")


def _ucie(b: _Builder) -> None:
    """UCIe between neighbouring cubes of a SIP, at the gateway routers the router uses."""
    mesh = b.cfg.cube.mesh
    u = b.cfg.sip.ucie
    for a in b.topo.cubes:
        for c in b.topo.cubes:
            if a.sip != c.sip:
                continue
            if (c.row, c.col) == (a.row, a.col + 1):
                ga, gc = f"r{mesh.rows // 2}c{mesh.cols - 1}", f"r{mesh.rows // 2}c0"
            elif (c.row, c.col) == (a.row + 1, a.col):
                ga, gc = f"r{mesh.rows - 1}c{mesh.cols // 2}", f"r0c{mesh.cols // 2}"
            else:
                continue
            b.duplex(f"{a.id}.{ga}", f"{c.id}.{gc}", u.latency_ns, u.bw_gbs, "ucie")


def _chip_links(b: _Builder) -> None:
    """`links_per_pair` full-duplex chip links per neighbour pair of chips, between the
    chips' port routers (system.link.cube / .router); lane 0 has the plain link id, lane k
    the id with `#k` appended."""
    system = b.cfg.system
    if system is None:
        return
    link = system.link
    for a, c in neighbour_pairs(system):
        pa, pc = chip_port(b.cfg, a), chip_port(b.cfg, c)
        for lane in range(link.links_per_pair):
            for src, dst in ((pa, pc), (pc, pa)):
                lid = chip_link_id(src, dst, lane)
                b.topo.links[lid] = LinkSpec(lid, src, dst, link.latency_ns, link.bw_gbs,
                                             "chip_link")
