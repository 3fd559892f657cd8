"""Expand a TopologyConfig into a Topology (nodes, links, cubes, PEs, address map)."""

from __future__ import annotations

from kernbench.config.schema import TopologyConfig
from kernbench.topology.model import PE_COMPONENTS, Cube, LinkSpec, Node, Pe, Topology

GIB = 1 << 30


def build_topology(cfg: TopologyConfig) -> Topology:
    topo = Topology(config=cfg)
    cs = cfg.cube
    hbm_bytes = int(cs.hbm_ctrl.capacity_gib * GIB)
    sram_bytes = cs.shared_sram.capacity_kib * 1024 if cs.shared_sram else 0
    index = 0
    for s in range(cfg.sip.count):
        for r in range(cfg.sip.cubes.rows):
            for c in range(cfg.sip.cubes.cols):
                cid = f"sip{s}.cube{r * cfg.sip.cubes.cols + c}"
                topo.cubes.append(
                    Cube(cid, index, s, r, c, index * hbm_bytes, hbm_bytes,
                         index * sram_bytes, sram_bytes)
                )
                index += 1

    def add_node(nid: str, spec, cube: Cube) -> None:  # noqa: ANN001
        topo.nodes[nid] = Node(nid, spec.kind, spec.impl, spec, cube.id)

    def add_link(src: str, dst: str, lat: float, bw: float, kind: str) -> None:
        lid = f"{src}->{dst}"
        topo.links[lid] = LinkSpec(lid, src, dst, lat, bw, kind)

    pe_index = 0
    for cube in topo.cubes:
        mesh = cs.mesh
        for r in range(mesh.rows):
            for c in range(mesh.cols):
                add_node(f"{cube.id}.r{r}c{c}", cs.router, cube)
        for r in range(mesh.rows):
            for c in range(mesh.cols):
                here = f"{cube.id}.r{r}c{c}"
                for nr, nc in ((r, c + 1), (r + 1, c)):
                    if nr < mesh.rows and nc < mesh.cols:
                        there = f"{cube.id}.r{nr}c{nc}"
                        add_link(here, there, cs.router.hop_latency_ns, cs.router.link_bw_gbs, "mesh")
                        add_link(there, here, cs.router.hop_latency_ns, cs.router.link_bw_gbs, "mesh")
        hbm = f"{cube.id}.hbm_ctrl"
        add_node(hbm, cs.hbm_ctrl, cube)
        attach = (
            [f"r{r}c{c}" for r in range(mesh.rows) for c in range(mesh.cols)]
            if cs.hbm_ctrl.attach == "all"
            else list(cs.hbm_ctrl.attach)
        )
        for name in attach:
            rid = f"{cube.id}.{name}"
            add_link(rid, hbm, cs.hbm_ctrl.port_latency_ns, cs.hbm_ctrl.port_bw_gbs, "hbm_port")
            add_link(hbm, rid, cs.hbm_ctrl.port_latency_ns, cs.hbm_ctrl.port_bw_gbs, "hbm_port")
        if cs.shared_sram is not None:
            sram = f"{cube.id}.shared_sram"
            add_node(sram, cs.shared_sram, cube)
            rid = f"{cube.id}.{cs.shared_sram.router}"
            add_link(rid, sram, cs.shared_sram.latency_ns, cs.shared_sram.bw_gbs, "sram_port")
            add_link(sram, rid, cs.shared_sram.latency_ns, cs.shared_sram.bw_gbs, "sram_port")
        add_node(f"{cube.id}.m_cpu", cs.m_cpu, cube)
        mrid = f"{cube.id}.{cs.m_cpu.router}"
        add_link(f"{cube.id}.m_cpu", mrid, cs.links.pe_router_latency_ns, cs.links.pe_router_bw_gbs, "pe")
        add_link(mrid, f"{cube.id}.m_cpu", cs.links.pe_router_latency_ns, cs.links.pe_router_bw_gbs, "pe")
        for local, rname in enumerate(cs.pe_layout):
            pid = f"{cube.id}.pe{local}"
            rid = f"{cube.id}.{rname}"
            topo.pes.append(Pe(pid, pe_index, cube, local, rid))
            pe_index += 1
            for comp in PE_COMPONENTS:
                spec = getattr(cs.pe_template, comp)
                add_node(f"{pid}.{comp}", spec, cube)
                for extra in range(1, getattr(spec, "count", 1)):  # te_id / ve_id > 0
                    add_node(f"{pid}.{comp}{extra}", spec, cube)
            add_link(pid, rid, cs.links.pe_router_latency_ns, cs.links.pe_router_bw_gbs, "pe")
            add_link(rid, pid, cs.links.pe_router_latency_ns, cs.links.pe_router_bw_gbs, "pe")

    # UCIe between neighbouring cubes of a SIP, at the gateway routers the router uses.
    mesh = cs.mesh
    for a in topo.cubes:
        for b in topo.cubes:
            if a.sip != b.sip:
                continue
            if (b.row, b.col) == (a.row, a.col + 1):
                ga, gb = f"r{mesh.rows // 2}c{mesh.cols - 1}", f"r{mesh.rows // 2}c0"
            elif (b.row, b.col) == (a.row + 1, a.col):
                ga, gb = f"r{mesh.rows - 1}c{mesh.cols // 2}", f"r0c{mesh.cols // 2}"
            else:
                continue
            u = cfg.sip.ucie
            add_link(f"{a.id}.{ga}", f"{b.id}.{gb}", u.latency_ns, u.bw_gbs, "ucie")
            add_link(f"{b.id}.{gb}", f"{a.id}.{ga}", u.latency_ns, u.bw_gbs, "ucie")
    return topo
