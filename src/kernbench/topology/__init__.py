"""Config → node graph: ids, links, wires (declared ports), XY routes, address map; and
the topology's peak rates and roofline (peaks.py)."""

from kernbench.config import load_topology_config
from kernbench.topology.build import build_topology
from kernbench.topology.model import Cube, LinkSpec, Node, Pe, Topology

__all__ = ["Cube", "LinkSpec", "Node", "Pe", "Topology", "build_topology", "load_topology"]


def load_topology(source: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Topology:
    """Preset name or YAML path (+ `--set` overrides) → Topology."""
    return build_topology(load_topology_config(source, overrides))
