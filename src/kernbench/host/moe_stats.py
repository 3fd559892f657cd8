"""stats.json's `moe` section: how the routing loaded the experts of an MoE model.

From `Graph.metadata["llm"]["moe"]` (written by `models.llm_graph`): the routing
distribution, and per expert layer the tokens routed to every expert (a token counts once
per expert it chose: Σ = tokens × k) with the imbalance max / mean. `total` adds the layers
up expert by expert. Schema in docs/stats.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.ir.model import Graph
from kernbench.models.moe_routing import imbalance


def moe_section(g: Graph) -> dict[str, Any] | None:
    """The section, or None for a graph that is not a shape-only MoE model."""
    m = (g.metadata.get("llm") or {}).get("moe")
    if not m:
        return None
    layers = []
    total = np.zeros(int(m["n_experts"]), dtype=np.int64)
    for ly in m["layers"]:
        c = np.asarray(ly["tokens_per_expert"], dtype=np.int64)
        total += c
        layers.append({"layer": ly["layer"], "tokens_per_expert": ly["tokens_per_expert"],
                       "max": int(c.max()), "mean": round(float(c.mean()), 6),
                       "imbalance": round(imbalance(c), 6),
                       "idle_experts": int((c == 0).sum())})
    worst = max((ly["imbalance"] for ly in layers), default=0.0)
    return {"routing": m["routing"], "n_experts": m["n_experts"], "top_k": m["top_k"],
            "moe_layers": len(layers), "max_layer_imbalance": worst,
            "total": {"tokens_per_expert": [int(v) for v in total],
                      "imbalance": round(imbalance(total), 6)},
            "layers": layers}


def idle_weights(g: Graph) -> list[str]:
    """The weights of experts no token chose (held in HBM, read by no node)."""
    m = (g.metadata.get("llm") or {}).get("moe") or {}
    return [w for ly in m.get("layers", []) for w in ly.get("idle_weights", [])]
