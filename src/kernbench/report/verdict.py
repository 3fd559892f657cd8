"""The run's bottleneck and its bound verdict, from one source: the most utilized unit of
stats.json's `bottleneck`. A unit that computes (pe_gemm, pe_math) makes the run
compute-bound; one that moves data to or from memory (pe_dma, pe_fetch_store, the HBM
controller and its channels, TCM, shared SRAM) memory-bound; a mesh or chip-to-chip link
interconnect-bound. The roofline bounds are a different figure (what the hardware could do
at best) and are printed as numbers, never as a second verdict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

COMPUTE_KINDS = frozenset({"pe_gemm", "pe_math"})
INTERCONNECT_KINDS = frozenset({"link", "ucie"})


def bound_class(kind: str | None) -> str | None:
    """`compute`, `memory` or `interconnect` for a bottleneck kind (None: no bottleneck)."""
    if kind is None:
        return None
    if kind in COMPUTE_KINDS:
        return "compute"
    if kind in INTERCONNECT_KINDS:
        return "interconnect"
    return "memory"


def bottleneck_line(b: Mapping[str, Any]) -> str:
    """'bottleneck: <unit> (<kind>), busy N % of the run: the run is <class>-bound'."""
    if not b.get("component"):
        return "bottleneck: none (no unit was busy)"
    return (f"bottleneck: {b['component']} ({b['kind']}), busy {100 * b['utilization']:.1f} % "
            f"of the run: the run is {b['bound_by']}-bound")
