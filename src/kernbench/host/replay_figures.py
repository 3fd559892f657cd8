"""The whole-model figures of a replayed run (host.block_replay) besides its time.

A replayed run simulates the prologue, k blocks and the epilogue; the L − k replayed blocks
repeat a simulated one. Every figure of stats.json that adds up over the model is therefore
the simulated run's plus (L − k) × one block's:

- the action counts (`energy.actions`, hence the dynamic energy by component kind, the MACs
  and `energy.ops`): a block's counts are the mean over the middle blocks 1..k−2 (the
  blocks that stand for the replayed ones; identical blocks compile to identical commands,
  so the counts are the same in each);
- the static energy: static power × the whole model's `total_ns` (recomputed from it);
- average power, TOPS/W and the energy per token: from the totals above;
- `commands_completed`: plus (L − k) × a middle block's CMDQ entries;
- the whole-model roofline point (the report's star): `replay.model_macs` and
  `replay.model_bytes`, the layers' MACs and HBM bytes plus (L − k) × a middle block's.

What stays a figure of the simulated blocks is said so in `replay.simulated_only`: the
per-entry, per-engine, per-link, per-memory and per-layer sections, the critical path and
the bottleneck's utilization.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kernbench.common.program import LayerSpan
from kernbench.report.energy import energy_report
from kernbench.report.stats import (
    set_commands_completed,
    set_energy,
    set_section,
    set_token_energy,
)
from kernbench.topology.model import Topology

#: the action counts of the commands of some layers (host.simulate.CmdqRun.layer_actions)
ActionsOf = Callable[[list[str]], dict[str, int]]

SIMULATED_ONLY = ["entries", "critical_path", "engines", "links", "memories", "layers",
                  "bottleneck"]


def block_layers(layer_block: dict[str, int], blocks: Iterable[int]) -> list[list[str]]:
    """The layer ids of each of `blocks` (sorted, so blocks list their layers alike)."""
    return [sorted(lid for lid, b in layer_block.items() if b == blk) for blk in blocks]


def whole_model_figures(stats: dict[str, Any], layer_block: dict[str, int], simulated: int,
                        extra: int, spans: dict[str, LayerSpan], topology: Topology,
                        actions_of: ActionsOf | None) -> None:
    """Turn the additive figures of the truncated run's `stats` into the whole model's (see
    the module docstring); `extra` replayed blocks, `actions_of(layer ids)` the action
    counts of those layers' commands. Call after `total_ns` is the whole model's."""
    middle = block_layers(layer_block, range(1, simulated - 1))
    replay = dict(stats.get("replay", {}))
    if "commands_completed" in stats:
        per_block = _mean([sum(spans[lid].entries for lid in b if lid in spans)
                           for b in middle])
        set_commands_completed(stats, int(stats["commands_completed"]) + round(extra * per_block))
    layers = stats.get("layers")
    if layers:
        for key, name in (("macs", "model_macs"), ("bytes", "model_bytes")):
            per_block = _mean([sum(layers[lid].get(key, 0) for lid in b if lid in layers)
                               for b in middle])
            replay[name] = sum(v.get(key, 0) for v in layers.values()) + round(extra * per_block)
    if "energy" in stats and actions_of is not None:
        counts = dict(stats["energy"]["actions"])
        per = [actions_of(b) for b in middle]
        for a in sorted(counts):
            counts[a] = int(counts[a]) + round(extra * _mean([p.get(a, 0) for p in per]))
        old = stats["energy"]
        set_energy(stats, energy_report(topology, counts, float(stats["total_ns"])).to_json())
        if old.get("tokens"):
            set_token_energy(stats, old["tokens"])
    replay["simulated_only"] = [k for k in SIMULATED_ONLY if k in stats]
    set_section(stats, "replay", replay)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0
