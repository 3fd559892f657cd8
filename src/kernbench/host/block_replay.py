"""Simulate identical decoder layers once and replay their timing.

A transformer is a prologue (embedding), L identical blocks and an epilogue (final norm,
LM head). When the IR marks its blocks (`LayerIR.metadata["block"]`, as
`models.llm_graph` does) and every block has the same signature (op types, attributes,
tensor shapes and bitwidths, node by node), the run compiles and simulates the model with
its first k blocks only (k = 4, or 3 for a model of 4 or 5 blocks), then replays:

    total(L) = total(k) + (L - k) × P

Block b's period is p_b = end(b) − end(b−1), where end(b) is the time the last command of
block b completes. The blocks that stand for the replayed ones are the middle blocks
(1..k−2: one block before and one after them, as blocks 1..L−2 of the whole model have);
P is the mean of their periods. Block 0 (after the prologue) and block k−1 (before the
epilogue, whose weight loads overlap it) are simulated, not replayed.

The check that proves the replay, on every run: the compared periods must lie within
±`TOLERANCE` (1 %) of their mean, so that a replayed block whose period stays in the
observed band is off by at most 1 %. The compared periods are the middle blocks' p_b and,
for every b ≥ 2, the layer-wise period q_b: the median over the block's layers j of
end(b, j) − end(b−1, j), how much later each layer of block b ends than the same layer of
block b−1. The median leaves out the few layers at the last block's end that overlap the
epilogue (its first layers and weight loads), so the compared periods measure the
blocks, like with like. q_1 is not compared: block 0 starts cold after the prologue, so
most of its layers end early relative to block 1 (Qwen2-7B decode b8 kv8192: q_1 13 %
above p_1, p_2, q_2, q_3, which agree within 0.7 %). (This check used to
compare p_1 with the epilogue-adjacent p_2 when k = 3: it measured the epilogue's overlap,
±0.86 % on a 4-layer decode whose replay was within 0.17 % of `--exact`, one compiler
change away from a refused replay.) Periods that alternate (a two-block cycle: the same
block program meets the machine in one of two states) fail that check although their mean
over a whole cycle is steady; when the check fails and both the middle and the layer-wise
periods come in whole pairs, it compares their two-block means instead (p_1 + p_2) / 2, …
and (q_2 + q_3) / 2, …, within the same ±`TOLERANCE`; P, the mean of the middle periods,
is then the mean over whole cycles (`replay.period_cycle_blocks` = 2 in stats.json). When
the blocks differ or the check fails, the whole model is simulated (as with `--exact`).
A run that simulates more than 4 blocks (`--replay-blocks N`) may have the check leave out
leading warm-up blocks: the fewest w (keeping at least two middle periods) for which the
periods of blocks w + 1.. pass it; P is then their mean (`replay.warmup_blocks` = w). The
warm-up blocks are simulated, so they count at their own time. tests/llm/test_block_replay.py shows replay within
1 % of `--exact` on 4-layer models; docs/performance.md compares both on real-size models.

stats.json of a replayed run: `total_ns`, `total_cycles`, `roofline_fraction`, `estimate_ns`,
`model_bound`, `energy`, `commands_completed` and the `llm` section describe the whole
model (host.replay_figures extrapolates the additive ones), and so do `replay.model_macs`
and `replay.model_bytes` (the report's whole-model roofline point); `entries`, `engines`,
`links`, `memories`, `layers`, the critical path and the bottleneck describe the
simulated prologue + k blocks + epilogue (listed in `replay.simulated_only`); `replay`
says what was done.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kernbench.common.program import LayerSpan
from kernbench.compiler.weights_fit import REPLAY_KEPT_BLOCKS, REPLAY_OF_BLOCKS
from kernbench.errors import InputError
from kernbench.host.replay_figures import ActionsOf, whole_model_figures
from kernbench.ir.model import Graph
from kernbench.report.stats import (
    ModelBounds,
    set_estimate_total,
    set_model_bounds,
    set_section,
    set_whole_time,
)
from kernbench.topology.model import Topology

SIMULATED_BLOCKS = 4
TOLERANCE = 0.01


@dataclass(frozen=True)
class ReplayPlan:
    blocks: int           # blocks of the whole model
    simulated: int        # blocks kept in the simulated graph


class ReplayCheckFailed(Exception):
    """The simulated blocks did not reach a steady period: simulate everything."""


def _blocks(g: Graph) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for n in g.nodes:
        b = n.metadata.get("block")
        if isinstance(b, int):
            out.setdefault(b, []).append(n)
    return out


def _signature(g: Graph, nodes: list[Any]) -> str:
    t = g.tensors
    sig = []
    for n in nodes:
        sig.append([n.op_type, n.attributes, n.qbits_weight, n.qbits_activation, n.qbits_kv,
                    [(t[i].shape, t[i].dtype, t[i].const) if i else None for i in n.inputs],
                    [(t[o].shape, t[o].dtype) for o in n.outputs]])
    return json.dumps(sig, sort_keys=True, default=str)


def simulated_blocks(n: int | None) -> int:
    """`--replay-blocks` (None: `SIMULATED_BLOCKS`), checked: the replay check needs at
    least 3 simulated blocks."""
    if n is None:
        return SIMULATED_BLOCKS
    if n < 3:
        raise InputError(f"--replay-blocks {n}: the replay check needs at least 3 simulated "
                         "blocks", field="--replay-blocks")
    return n


def plan_replay(g: Graph, simulated: int = SIMULATED_BLOCKS) -> tuple[ReplayPlan | None, str]:
    """(plan, why): a plan when the graph has ≥ 4 marked, identical blocks; else None and
    the reason the whole model is simulated. `simulated` (≥ 3): the blocks to simulate,
    fewer when the model has fewer than `simulated` + 2 (never fewer than 3: the check
    needs a middle block's period and a layer-wise one)."""
    if simulated < 3:
        raise ValueError(f"replay simulates at least 3 blocks, not {simulated}")
    blocks = _blocks(g)
    if not blocks:
        return None, "the graph marks no repeated blocks"
    ids = sorted(blocks)
    if ids != list(range(len(ids))):
        return None, "block ids are not 0..L-1"
    if len(ids) < 4:
        return None, f"{len(ids)} blocks (replay needs at least 4)"
    first = _signature(g, blocks[0])
    for b in ids[1:]:
        if _signature(g, blocks[b]) != first:
            return None, f"block {b} differs from block 0"
    keep = max(3, min(simulated, len(ids) - 2))
    return ReplayPlan(blocks=len(ids), simulated=keep), "identical blocks"


def truncate_blocks(g: Graph, keep: int) -> Graph:
    """The graph with blocks 0..keep-1 only: what followed the last block reads the
    outputs of block keep-1 instead (blocks are identical, so node j of one block maps to
    node j of the other); inputs, outputs and constants nobody uses any more are dropped."""
    blocks = _blocks(g)
    last = max(blocks)
    rename: dict[str, str] = {}
    for b in range(keep, last + 1):
        src = keep - 1 - (last - b)
        if src < 0:
            continue
        for n_from, n_to in zip(blocks[b], blocks[src], strict=True):
            for o_from, o_to in zip(n_from.outputs, n_to.outputs, strict=True):
                rename[o_from] = o_to
    nodes = []
    for n in g.nodes:
        b = n.metadata.get("block")
        if isinstance(b, int) and b >= keep:
            continue
        m = n.model_copy(deep=True)
        m.inputs = [rename.get(i, i) for i in m.inputs]
        nodes.append(m)
    used = {i for n in nodes for i in n.inputs if i} | {o for n in nodes for o in n.outputs}
    out = Graph(created_by=g.created_by, nodes=nodes,
                inputs=[i for i in g.inputs if i in used],
                outputs=[rename.get(o, o) for o in g.outputs if rename.get(o, o) in used],
                metadata=json.loads(json.dumps(g.metadata)),
                tensors={k: v.model_copy(deep=True) for k, v in g.tensors.items() if k in used},
                qconfig=g.qconfig,
                weights={k: v for k, v in g.weights.items() if k in used})
    if "llm" in out.metadata:
        out.metadata["llm"]["blocks"] = keep
    # the whole model's blocks and those kept: the memory plan lays the truncated program
    # out as the whole model's share (compiler.weights_fit)
    out.metadata[REPLAY_OF_BLOCKS] = last + 1
    out.metadata[REPLAY_KEPT_BLOCKS] = keep
    out.rebuild_links()
    return out


def _estimated_period(spans: dict[str, LayerSpan], layer_block: dict[str, int],
                      blocks: int, middle: int) -> float:
    """The cost model's block period, measured like the simulated one: the mean distance
    between the estimated ends of consecutive blocks, over the same `middle` periods."""
    ends = [0.0] * blocks
    for lid, span in spans.items():
        b = layer_block.get(lid)
        if b is not None and span.estimate_end_ns is not None:
            ends[b] = max(ends[b], span.estimate_end_ns)
    periods = [b - a for a, b in zip(ends, ends[1:], strict=False)][:middle]
    return sum(periods) / len(periods) if periods else 0.0


def apply_replay(stats: dict[str, Any], small: Graph, plan: ReplayPlan,
                 spans: dict[str, LayerSpan], topology: Topology | None = None,
                 actions_of: ActionsOf | None = None
                 ) -> dict[str, Any]:  # fmt: skip
    """Turn the stats of the truncated run into the whole model's (see the module
    docstring; `spans`: the simulated layers' spans; `actions_of(layer ids)`: their
    commands' action counts, for the energy; host.replay_figures); raise
    ReplayCheckFailed when the period is not steady."""
    layer_block = {n.id: n.metadata["block"] for n in small.nodes
                   if isinstance(n.metadata.get("block"), int)}
    d, periods, anchored, dev = steady_period(small, plan.simulated, spans)
    extra = plan.blocks - plan.simulated
    sim_total = float(stats["total_ns"])
    total = sim_total + extra * d
    set_whole_time(stats, total)
    if "layers" in stats:
        layers = stats["layers"]
        last = {lid for lid, b in layer_block.items() if b == plan.simulated - 1}
        block_bound = {k: sum(v[k] for lid, v in layers.items() if lid in last)
                       for k in ("bound_ns", "compute_bound_ns", "memory_bound_ns")}
        all_bound = {k: sum(v[k] for v in layers.values()) + extra * block_bound[k]
                     for k in block_bound}
        set_model_bounds(stats, ModelBounds(**all_bound, total_ns=total))
        if "estimate_ns" in stats:  # the replayed blocks cost the estimated block period
            set_estimate_total(stats, stats["estimate_ns"] + extra * _estimated_period(
                spans, layer_block, plan.simulated, len(periods) - 1))
    section: dict[str, Any] = {
        "blocks": plan.blocks, "simulated_blocks": plan.simulated,
        "block_period_ns": round(d, 3),
        "periods_ns": [round(p, 3) for p in periods],
        "anchored_periods_ns": [round(p, 3) for p in anchored],
        "period_deviation": round(dev, 6),
        "tolerance": TOLERANCE,
        "simulated_total_ns": round(sim_total, 3),
        "note": "entries, engines, links, memories and layers describe the simulated blocks",
    }
    set_section(stats, "replay", section | cycle_mark(periods, anchored))
    whole_model_figures(stats, layer_block, plan.simulated, extra, spans, topology,
                        actions_of if topology is not None else None)
    return stats


def steady_period(small: Graph, keep: int, spans: dict[str, LayerSpan]
                  ) -> tuple[float, list[float], list[float], float]:  # fmt: skip
    """The block period of the `keep` simulated blocks of `small` (`spans` by its layer
    ids): (period, block-end periods p_1.., layer-wise periods q_2.., their spread);
    raise ReplayCheckFailed when the spread exceeds TOLERANCE (the module docstring).
    With more than 4 simulated blocks, leading warm-up blocks may be left out of the
    check and of the period (`warmup_blocks`)."""
    layer_block = {n.id: n.metadata["block"] for n in small.nodes
                   if isinstance(n.metadata.get("block"), int)}
    ends = [0.0] * keep
    for lid, b in layer_block.items():
        if lid in spans:
            ends[b] = max(ends[b], spans[lid].end_ns)
    periods = [b - a for a, b in zip(ends, ends[1:], strict=False)]  # p_1 .. p_{k-1}
    anchored = _anchored_periods(small, keep, spans)  # q_2 .. q_{k-1}
    found = _steady(periods, anchored)
    if found is None:
        compared = periods[:-1] + anchored
        raise ReplayCheckFailed("block periods " + ", ".join(f"{p:.1f}" for p in compared)
                                + f" ns spread ±{100 * _spread(compared):.2f}% "
                                f"(> {100 * TOLERANCE:g}%; their two-block means too"
                                + (", and after a warm-up" if _max_warmup(periods) else "")
                                + ")")
    w, dev = found
    middle = periods[:-1][w:]
    return sum(middle) / len(middle), periods, anchored, dev


def _max_warmup(periods: list[float]) -> int:
    """The most leading blocks the check may leave out: two middle periods must remain."""
    return max(0, len(periods) - 1 - 2)


def _steady(periods: list[float], anchored: list[float]) -> tuple[int, float] | None:
    """(warm-up blocks w, spread) for the fewest leading blocks w whose removal leaves the
    periods of blocks w + 1.. (middle p_b and layer-wise q_b) within TOLERANCE, per period
    or, for a two-block cycle, on their two-block means; None when no w does."""
    for w in range(_max_warmup(periods) + 1):
        middle = periods[:-1][w:]
        later = anchored[max(0, w - 1):]  # q_b of blocks b > w (anchored[0] is q_2)
        if sum(middle) <= 0:
            continue
        dev = _spread(middle + later)
        if dev > TOLERANCE and _pairs(middle) and _pairs(later):
            dev = _spread(_pairs(middle) + _pairs(later))
        if dev <= TOLERANCE:
            return w, dev
    return None


def cycle_mark(periods: list[float], anchored: list[float]) -> dict[str, int]:
    """The marks of how `steady_period` accepted these periods: `warmup_blocks` when it
    left leading blocks out, `period_cycle_blocks` = 2 when it took two-block means (the
    per-period check alone refuses them); {} for steady periods from the first block."""
    found = _steady(periods, anchored)
    if found is None:
        return {}
    w = found[0]
    middle, later = periods[:-1][w:], anchored[max(0, w - 1):]
    marks = {"warmup_blocks": w} if w else {}
    if _spread(middle + later) > TOLERANCE:
        marks["period_cycle_blocks"] = 2
    return marks


def _spread(xs: list[float]) -> float:
    """The largest distance of `xs` from their mean, relative to the mean (1 when the
    mean is not positive)."""
    mean = sum(xs) / len(xs)
    return max(abs(x - mean) for x in xs) / mean if mean > 0 else 1.0


def _pairs(xs: list[float]) -> list[float]:
    """The means of consecutive pairs of `xs` (x0, x1), (x2, x3), ...: the periods of a
    two-block cycle averaged over whole cycles; [] unless `xs` has a whole number (≥ 1)
    of pairs."""
    if not xs or len(xs) % 2:
        return []
    return [(xs[i] + xs[i + 1]) / 2 for i in range(0, len(xs), 2)]


def _anchored_periods(small: Graph, keep: int, spans: dict[str, LayerSpan]) -> list[float]:
    """q_b for b = 2..keep-1 (block 0 starts cold: see the module docstring): the median over the block's layers of how much later layer j
    of block b ends than layer j of block b−1. Only positions whose layer issues commands
    in every block count (views and folded transposes have no span); blocks are identical,
    so position j is the same layer in each. One layer's end moves with contention by
    about ±1 % (measured on a 4-layer decode); the median of ~20 does not, and it ignores
    the few layers at the last block's end that overlap the epilogue."""
    blocks = _blocks(small)
    width = min(len(blocks[b]) for b in range(keep))
    live = [j for j in range(width) if all(blocks[b][j].id in spans for b in range(keep))]
    if not live:
        return []
    out = []
    for b in range(2, keep):
        diffs = sorted(spans[blocks[b][j].id].end_ns - spans[blocks[b - 1][j].id].end_ns
                       for j in live)
        n = len(diffs)
        out.append(diffs[n // 2] if n % 2 else (diffs[n // 2 - 1] + diffs[n // 2]) / 2)
    return out
