"""Shared helpers for the benchmark kernels: load a topology, verify, roofline."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.numerics.compare import compare
from kernbench.topology import Topology, load_topology
from kernbench.triton_emu.runtime import DEVICE, LaunchResult, roofline


def topo_of(topology: Any, overrides: list[str] | None = None) -> Topology:
    if isinstance(topology, Topology):
        return topology
    return load_topology(topology or "small", overrides or [])


def fresh() -> None:
    """Start from an empty device (benchmarks do not share buffers)."""
    DEVICE.reset()


def report(name: str, res: LaunchResult, topo: Topology, actual: np.ndarray,
           expected: np.ndarray, flops: float, hbm_bytes: float, bits: int,
           tol: float | None = None) -> dict[str, Any]:  # fmt: skip
    cmp = compare(actual, expected, tol=tol)
    rf = roofline(topo, flops, hbm_bytes, bits, pes=res.pes_used)
    return {
        "kernel": name, "topology": topo.name, "grid": list(res.grid), "pes": res.pes_used,
        "ok": cmp["allclose"], "max_abs_err": cmp["max_abs_err"], "cosine": cmp["cosine"],
        "total_ns": res.total_ns, "bound_ns": round(rf["bound_ns"], 3),
        "compute_bound_ns": round(rf["compute_ns"], 3), "memory_bound_ns": round(rf["memory_ns"], 3),
        "roofline_fraction": round(rf["bound_ns"] / res.total_ns, 4) if res.total_ns else 0.0,
        "commands": res.commands, "pass1_s": round(res.pass1_s, 3),
        "pass2_s": round(res.pass2_s, 3), "bottleneck": res.stats["bottleneck"],
        "hbm_util": max((m["utilization"] for k, m in res.stats["memories"].items()
                         if k.endswith("hbm_ctrl")), default=0.0),
    }
