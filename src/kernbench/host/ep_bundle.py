"""The bundle of an expert-parallel `--verify` run (docs/multichip.md): the ranks' graphs side by
side with the model they were split from.

The ranks' graphs carry rank-unique names (`compiler.parallel.rank_names`), so one
ir.json and one memory map hold them all: ir.json is the model (its nodes, inputs and
outputs: the reference the outputs are checked against) followed by every rank's nodes,
so the data pass finds the layer of a whole-layer op (TOPK, MOE_ROUTE) on any chip;
memory.json holds every rank's tensors at its chip's addresses, the inputs once with a
replica on every chip, and the model's outputs as views of rank 0's (chip 0's) outputs;
weights.npz every rank's constants.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernbench.ir.bundle_ir import save_bundle_ir
from kernbench.ir.model import Graph, load_weights, save_weights
from kernbench.topology.model import Topology


def _shift(a: dict[str, Any], off: int) -> dict[str, Any]:
    b = dict(a)
    b["address"] = a["address"] + off
    if "replicas" in a:
        b["replicas"] = [x + off for x in a["replicas"]]
    if a.get("parts"):
        b["parts"] = [[o, nb, addr + off] for o, nb, addr in a["parts"]]
    return b


def write_ep_bundle(bundle: Path, model: Graph, ranks: Sequence[Graph],
                    rank_bundles: Sequence[Path], chips: Sequence[int], topo: Topology,
                    entries: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Write the bundle (module docstring) into `bundle` (rank 0's compiled bundle);
    `rank_bundles[r]` is rank r's, compiled for one chip, `chips[r]` its chip."""
    per_cubes = len(topo.cubes) // topo.chips
    bases = [topo.cubes[c * per_cubes].hbm_base for c in range(topo.chips)]
    mem: dict[str, Any] | None = None
    tensors: dict[str, Any] = {}
    views: dict[str, Any] = {}
    weights: dict[str, Any] = {}
    for r, (rb, chip) in enumerate(zip(rank_bundles, chips, strict=True)):
        mr = json.loads((rb / "memory.json").read_text(encoding="utf-8"))
        mem = mem or mr
        for key, a in mr["tensors"].items():
            if key in model.inputs:
                if r == 0:
                    t = dict(a)
                    t["replicas"] = [x + bases[c] for c in chips
                                     for x in (a["replicas"] or [a["address"]])]
                    t["address"] = t["replicas"][0]
                    tensors[key] = t
                continue
            tensors[key] = _shift(a, bases[chip])
        for key, v in mr["views"].items():
            if key in model.inputs and r:
                continue
            views[key] = _shift(v, bases[chip])
        weights.update(load_weights(rb / "weights.npz"))
    assert mem is not None
    for o in model.outputs:
        views[o] = views[o + "@ep0"]
    mem["tensors"], mem["views"] = tensors, views
    (bundle / "memory.json").write_text(json.dumps(mem, indent=1, sort_keys=True),
                                        encoding="utf-8")
    save_weights(weights, bundle / "weights.npz")
    union = model.model_copy()
    union.nodes = copy.deepcopy(list(model.nodes) + [n for g in ranks for n in g.nodes])
    union.tensors = copy.deepcopy({**model.tensors,
                                   **{k: t for g in ranks for k, t in g.tensors.items()}})
    union.weights = {**model.weights, **{k: w for g in ranks for k, w in g.weights.items()}}
    union.metadata = dict(model.metadata)
    union.rebuild_links()
    save_bundle_ir(union, bundle)  # every weight (no listing)
    (bundle / "cmdq.json").write_text(json.dumps({"cmdq": entries, "metadata": meta}),
                                      encoding="utf-8")
