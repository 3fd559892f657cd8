"""Silicon area of a topology, from each component's parameters (docs/energy.md).

Per instance: pe_gemm rows × cols × area_um2_per_cell; pe_math lanes × area_um2_per_lane;
pe_tcm and shared_sram capacity (MiB) × area_mm2_per_mib; pe_fetch_store register file
(MiB) × area_mm2_per_mib; router ports × area_mm2_per_port, where a router's ports are its
mesh neighbours plus its local ports (PEs, M_CPU, HBM and SRAM attachments); hbm_ctrl
channels × area_mm2_per_channel (controller and PHY on the logic die; the DRAM stacks are
not die area); pe_cpu / pe_scheduler / pe_dma / pe_mmu / m_cpu a fixed area_mm2; each
directed UCIe link bw_gbs × area_mm2_per_gbs, half on each of the two dies; each directed
chip link area_mm2_per_link, half on each chip (in the cubes its ends attach to). A cube's
area is the sum over its instances, a SIP's over its cubes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernbench.topology.model import Node, Topology

MIB = 1 << 20


def _round(x: float) -> float:
    return round(float(x), 6)


def router_ports(topology: Topology) -> dict[str, int]:
    """Ports per router id: distinct neighbours it has a link to (mesh, local, UCIe)."""
    out: dict[str, set[str]] = {nid: set() for nid, n in topology.nodes.items()
                                if n.kind == "router"}
    for link in topology.links.values():
        if link.src in out:
            out[link.src].add(link.dst)
    return {r: len(v) for r, v in out.items()}


def node_area_mm2(node: Node, ports: int = 0) -> float:
    """Area of one component instance (mm²) from its spec."""
    s: Any = node.spec
    k = node.kind
    if k == "pe_gemm":
        return s.rows * s.cols * s.area_um2_per_cell * 1e-6
    if k == "pe_math":
        return s.lanes * s.area_um2_per_lane * 1e-6
    if k in ("pe_tcm", "shared_sram"):
        return s.capacity_kib * 1024 / MIB * s.area_mm2_per_mib
    if k == "pe_fetch_store":
        return s.register_file_kib * 1024 / MIB * s.area_mm2_per_mib
    if k == "router":
        return ports * s.area_mm2_per_port
    if k == "hbm_ctrl":
        return s.channels * s.area_mm2_per_channel
    return float(getattr(s, "area_mm2", 0.0))


@dataclass(frozen=True)
class AreaReport:
    """Die area (mm²): by component kind, per cube and per SIP (stats.json `area_mm2`)."""

    by_kind: dict[str, float]
    by_cube: dict[str, float]
    by_sip: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.by_cube[c] for c in sorted(self.by_cube))

    def to_json(self) -> dict[str, Any]:
        return {"total": _round(self.total),
                "by_component_kind": {k: _round(v) for k, v in sorted(self.by_kind.items())},
                "per_cube": {k: _round(v) for k, v in sorted(self.by_cube.items())},
                "per_sip": {k: _round(v) for k, v in sorted(self.by_sip.items())}}


def area_report(topology: Topology) -> AreaReport:
    """Area of every instance of `topology`, summed by kind, cube and SIP."""
    ports = router_ports(topology)
    by_kind: dict[str, float] = {}
    by_cube: dict[str, float] = {c.id: 0.0 for c in topology.cubes}
    for nid in sorted(topology.nodes):
        node = topology.nodes[nid]
        a = node_area_mm2(node, ports.get(nid, 0))
        by_kind[node.kind] = by_kind.get(node.kind, 0.0) + a
        by_cube[node.cube] += a
    u = topology.config.sip.ucie
    for lid in sorted(topology.links):
        link = topology.links[lid]
        if link.kind != "ucie":
            continue
        a = link.bw_gbs * u.area_mm2_per_gbs
        by_kind["ucie"] = by_kind.get("ucie", 0.0) + a
        for end in (link.src, link.dst):  # TX on one die, RX on the other
            by_cube[end.rpartition(".")[0]] += a / 2
    system = topology.config.system
    for lid in sorted(topology.links):
        link = topology.links[lid]
        if link.kind != "chip_link" or system is None:
            continue
        a = system.link.area_mm2_per_link
        by_kind["chip_link"] = by_kind.get("chip_link", 0.0) + a
        for end in (link.src, link.dst):
            by_cube[end.rpartition(".")[0]] += a / 2
    by_sip: dict[str, float] = {}
    for c in topology.cubes:
        key = f"sip{c.sip}"
        by_sip[key] = by_sip.get(key, 0.0) + by_cube[c.id]
    return AreaReport(by_kind, by_cube, by_sip)
