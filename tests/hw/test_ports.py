"""Declared ports: the builder wires them, the simulator binds and checks them at build time."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernbench.components.registry import lookup
from kernbench.errors import InputError
from kernbench.sim_engine.engine import Simulator
from kernbench.topology import load_topology
from kernbench.topology.model import Wire

SRC = Path(__file__).resolve().parents[2] / "src" / "kernbench"


def test_every_wire_matches_a_declared_port_of_the_right_kind():
    topo = load_topology("base")
    for w in topo.wires:
        src, dst = topo.nodes[w.src], topo.nodes[w.dst]
        ports = {p.name: p for p in lookup(src.kind, src.impl).PORTS}
        assert w.port in ports, (w, sorted(ports))
        assert ports[w.port].peer_kind == dst.kind
    # the M_CPU of each of the 4 cubes reaches all 64 PEs, in global PE order
    m_cpu = [w.dst for w in topo.wires if w.src == topo.cubes[3].m_cpu]
    assert m_cpu == [p.cpu for p in topo.pes] and len(m_cpu) == 64


def test_bound_peers_are_the_wired_components():
    sim = Simulator(load_topology("small", ["cube.pe_template.pe_gemm.count=2"]))
    sched = sim.components["sip0.cube0.pe1.pe_scheduler"]
    assert [e.id for e in sched.peers_of("gemm")] == ["sip0.cube0.pe1.pe_gemm",
                                                      "sip0.cube0.pe1.pe_gemm1"]
    assert sched.peer("tcm") is sim.components["sip0.cube0.pe1.pe_tcm"]
    assert sim.components["sip0.cube0.pe1.pe_cpu"].peer("scheduler") is sched


def test_a_required_port_left_open_fails_at_build_time():
    topo = load_topology("small")
    topo.wires = [w for w in topo.wires if w != Wire("sip0.cube0.pe2.pe_dma", "mmu",
                                                        "sip0.cube0.pe2.pe_mmu")]
    with pytest.raises(InputError, match=r"sip0.cube0.pe2.pe_dma: .*port 'mmu' \(pe_mmu\) is "
                                         r"not connected"):
        Simulator(topo)


def test_an_undeclared_port_fails_at_build_time():
    topo = load_topology("small")
    topo.wires.append(Wire("sip0.cube0.pe0.pe_gemm", "tcm", "sip0.cube0.pe0.pe_tcm"))
    with pytest.raises(InputError, match="PeGemm declares no port 'tcm'"):
        Simulator(topo)


def test_a_peer_of_the_wrong_kind_fails_at_build_time():
    topo = load_topology("small")
    topo.wires = [Wire(w.src, w.port, "sip0.cube0.pe0.pe_mmu")
                  if w.src == "sip0.cube0.pe0.pe_cpu" else w for w in topo.wires]
    with pytest.raises(InputError, match="port 'scheduler' takes a pe_scheduler, wired to "
                                         r"sip0.cube0.pe0.pe_mmu \(a pe_mmu\)"):
        Simulator(topo)


def test_a_wire_to_an_unknown_node_fails_at_build_time():
    topo = load_topology("small")
    topo.wires.append(Wire("sip0.cube0.m_cpu", "pe_cpus", "sip0.cube0.pe9.pe_cpu"))
    with pytest.raises(InputError, match="no node 'sip0.cube0.pe9.pe_cpu' exists"):
        Simulator(topo)


def test_a_scalar_port_wired_twice_fails():
    topo = load_topology("small")
    topo.wires.append(Wire("sip0.cube0.pe0.pe_dma", "tcm", "sip0.cube0.pe1.pe_tcm"))
    with pytest.raises(InputError, match="port 'tcm' is wired twice"):
        Simulator(topo)


def test_no_component_looks_a_peer_up_by_name():
    """components/ never indexes the simulator's component table (it has ports for that)."""
    for f in sorted((SRC / "components").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "components":
                raise AssertionError(f"{f.relative_to(SRC)}:{node.lineno} reads .components")
