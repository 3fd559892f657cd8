"""Config → node graph: ids, links, XY routes, address map."""

from kernbench.topology.build import build_topology
from kernbench.topology.model import Cube, LinkSpec, Node, Pe, Topology

__all__ = ["Cube", "LinkSpec", "Node", "Pe", "Topology", "build_topology", "load_topology"]


def load_topology(source: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Topology:
    """Preset name or YAML path (+ `--set` overrides) → Topology."""
    from kernbench.config import load_topology_config

    return build_topology(load_topology_config(source, overrides))
