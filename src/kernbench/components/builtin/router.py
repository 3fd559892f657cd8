"""Mesh router: dimension-ordered (XY) routing inside a cube, cube-grid XY across cubes.

The router's output links are reservation servers owned by the simulator (one per
direction, latency = hop latency, bandwidth = link bandwidth); the router decides the
path. Replace `impl` to try another routing function.
"""

from __future__ import annotations

from kernbench.components.base import ComponentBase
from kernbench.components.catalog import register


@register("router", "router_xy_v1")
class RouterXY(ComponentBase):
    def route_to(self, dst_router: str) -> tuple[str, ...]:
        """Link ids from this router to `dst_router`, X first then Y."""
        return self.sim.topology.route(self.id, dst_router)
