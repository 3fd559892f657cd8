"""stats.json's `moe` section of an expert-parallel run (schema in
docs/stats.md): the one-chip section's per-expert load over the whole batch, and how it
falls on the chips: `per_chip` (rows each chip's experts computed per layer) with the
imbalance max / mean across the chips, and the rows the all-to-alls carry between chips.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kernbench.compiler.collectives.plan import DTYPE_BYTES
from kernbench.compiler.parallel.ep_graph import MoeBlock
from kernbench.compiler.parallel.ep_program import EpSiteBuffers
from kernbench.ir.model import Graph
from kernbench.models.moe_routing import imbalance


def chip_loads(counts: Sequence[Sequence[int]], ep: int) -> list[int]:
    """Rows each of the `ep` chips' experts compute: Σ over the senders of their counts
    for the chip's experts (`counts[rank][expert]`)."""
    per = len(counts[0]) // ep
    tot = np.asarray(counts, dtype=np.int64).sum(axis=0)
    return [int(tot[c * per:(c + 1) * per].sum()) for c in range(ep)]


def cross_rows(counts: Sequence[Sequence[int]], ep: int) -> int:
    """Rows the dispatch sends to another chip (the combine sends as many back)."""
    per = len(counts[0]) // ep
    return sum(int(v) for s, row in enumerate(counts) for e, v in enumerate(row)
               if e // per != s % ep)


def ep_moe_section(blocks: list[MoeBlock], counts: list[list[list[int]]], ep: int,
                   dp: int, graph: Graph, sites: Sequence[EpSiteBuffers]) -> dict[str, Any]:
    """The section (module docstring); `counts[block][rank][expert]` over all ep × dp
    ranks, replica by replica."""
    m = (graph.metadata.get("llm") or {}).get("moe") or {}
    d = graph.tensors[blocks[0].x].shape[-1]
    eb = DTYPE_BYTES[sites[0].dtype] if sites else 0
    e_n, k = blocks[0].n_experts, blocks[0].top_k
    layers = []
    total = np.zeros(e_n, dtype=np.int64)
    chip_total = np.zeros(ep * dp, dtype=np.int64)
    a2a_rows = 0
    for b, c in zip(blocks, counts, strict=True):
        tpe = np.asarray(c, dtype=np.int64).sum(axis=0)
        total += tpe
        loads = [v for g in range(dp) for v in chip_loads(c[g * ep:(g + 1) * ep], ep)]
        chip_total += np.asarray(loads, dtype=np.int64)
        rows = sum(cross_rows(c[g * ep:(g + 1) * ep], ep) for g in range(dp))
        a2a_rows += 2 * rows
        layers.append({"layer": b.prefix.rstrip("."), "tokens_per_expert": tpe.tolist(),
                       "max": int(tpe.max()), "mean": round(float(tpe.mean()), 6),
                       "imbalance": round(imbalance(tpe), 6),
                       "idle_experts": int((tpe == 0).sum()),
                       "per_chip": loads, "chip_imbalance": round(imbalance(
                           np.asarray(loads)), 6), "cross_chip_rows": rows})
    return {"routing": m.get("routing", "the router on the run's inputs"),
            "n_experts": e_n, "top_k": k, "moe_layers": len(layers), "ep": ep,
            "experts_per_chip": e_n // ep,
            "max_layer_imbalance": max(ly["imbalance"] for ly in layers),
            "max_layer_chip_imbalance": max(ly["chip_imbalance"] for ly in layers),
            "total": {"tokens_per_expert": total.tolist(),
                      "imbalance": round(imbalance(total), 6),
                      "per_chip": chip_total.tolist(),
                      "chip_imbalance": round(imbalance(chip_total), 6)},
            "all_to_all": {"cross_chip_rows": a2a_rows, "row_bytes": d * eb,
                           "cross_chip_bytes": a2a_rows * d * eb},
            "layers": layers}
