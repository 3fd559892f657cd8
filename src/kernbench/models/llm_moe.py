"""The expert layer of a shape-only MoE decoder, as IR nodes (called by `llm_graph`).

For the T = batch × seq tokens of a layer with E routed experts, top k:

    router   GEMM x[T, d] · W_r[d, E] → logits
    weights  softmax: TOPK(logits) → SOFTMAX over the k (= softmax then renormalise) or
             SOFTMAX → TOPK (no renormalisation); sigmoid: ELEMENTWISE sigmoid → TOPK
             (→ REDUCE sum, ELEMENTWISE div when renormalised) → MUL by the scale factor
    route    MOE_ROUTE(indices) → rows_e (the tokens of each chosen expert), pos_j (where
             slot j's pair sits in the stacked expert outputs)
    expert e GATHER x rows_e → gate / up GEMMs (M = n_e), SILU, MUL, down GEMM →
             y_e [n_e, d]; an expert no token chose has no nodes
    combine  CONCAT y_e → Y[T·k, d]; per slot j: GATHER Y by pos_j → [T, d], MUL by the
             slot's weight column (TRANSPOSE + SPLIT of the weights), ADD
    shared   (DeepSeek) one gated MLP of n_shared × ffn on every token, ADDed

The counts n_e come from `models.moe_routing` (the routing distribution) and are recorded
in `Graph.metadata["llm"]["moe"]`; MOE_ROUTE checks at run time that the router chose
exactly them. Every routed expert's weights exist as constants (an idle expert's too:
they occupy HBM) and are listed under `moe.idle_weights` when no node reads them.
"""

from __future__ import annotations

from typing import Any

from kernbench.models.builder_api import GraphBuilder
from kernbench.models.moe_routing import Routing, expert_choice, expert_counts


def _weights(b: GraphBuilder, p: str, x2: str, logits: str, t: int) -> tuple[str, str]:
    """(routing weights [T, k], expert indices [T, k]) of the router's logits."""
    m = b.a.moe
    k = m.top_k
    pair = [t, k]
    if m.scoring == "sigmoid":
        s = b.one(f"{p}moe.score", "ELEMENTWISE", [logits], [t, m.n_experts],
                  {"op": "sigmoid"})
        w, idx = _topk(b, p, s, pair)
        if m.norm_topk:
            tot = b.one(f"{p}moe.wsum", "REDUCE", [w], [t, 1],
                        {"op": "sum", "axes": [1], "keepdims": True})
            w = b.one(f"{p}moe.wnorm", "ELEMENTWISE", [w, tot], pair, {"op": "div"})
    elif m.norm_topk:
        w, idx = _topk(b, p, logits, pair)
        w = b.one(f"{p}moe.softmax", "SOFTMAX", [w], pair, {"axis": 1})
    else:
        s = b.one(f"{p}moe.softmax", "SOFTMAX", [logits], [t, m.n_experts], {"axis": 1})
        w, idx = _topk(b, p, s, pair)
    if m.scale != 1.0:
        w = b.one(f"{p}moe.wscale", "MUL", [w, b.const(f"{p}moe.scale", [1])], pair)
    return w, idx


def _topk(b: GraphBuilder, p: str, scores: str, pair: list[int]) -> tuple[str, str]:
    w, idx = b.op(f"{p}moe.topk", "TOPK", [scores],
                  [(f"{p}moe.topk.w", pair), (f"{p}moe.topk.idx", pair)],
                  {"k": pair[1], "axis": 1, "largest": True, "sorted": True})
    b.g.tensors[idx].dtype = "int64"
    return w, idx


def _expert(b: GraphBuilder, p: str, e: int, xe: str, ffn: int) -> str:
    """A gated SiLU MLP on the rows `xe` (its own weights)."""
    q = f"{p}experts.{e}."
    g = b.gemm(f"{q}gate", xe, f"{q}gate", ffn, False)
    shp = b.g.tensors[g].shape
    g = b.one(f"{q}act", "SILU", [g], shp)
    u = b.gemm(f"{q}up", xe, f"{q}up", ffn, False)
    h = b.one(f"{q}glu", "MUL", [g, u], shp)
    return b.gemm(f"{q}down", h, f"{q}down", b.a.d_model, False)


def _combine(b: GraphBuilder, p: str, y: str, pos: list[str], w: str, t: int) -> str:
    """Σ_j w[:, j] · y[pos_j]: slot by slot, a row gather and a row-wise multiply-add."""
    d, k = b.a.d_model, len(pos)
    wt = b.one(f"{p}moe.w.t", "TRANSPOSE", [w], [k, t], {"perm": [1, 0], "view": False})
    cols = b.op(f"{p}moe.w.split", "SPLIT", [wt], [(f"{p}moe.w.{j}", [1, t]) for j in range(k)],
                {"axis": 0, "sizes": [1] * k}) if k > 1 else [wt]
    out = None
    for j in range(k):
        wj = b.one(f"{p}moe.w.{j}.col", "RESHAPE", [cols[j]], [t, 1],
                   {"shape": [t, 1], "view": True})
        g = b.one(f"{p}moe.combine.{j}", "GATHER", [y, pos[j]], [t, d], {"axis": 0})
        g = b.one(f"{p}moe.weigh.{j}", "MUL", [g, wj], [t, d])
        out = g if out is None else b.one(f"{p}moe.acc.{j}", "ADD", [out, g], [t, d])
    assert out is not None
    return out


def moe_mlp(b: GraphBuilder, i: int, x: str, routing: Routing) -> tuple[str, dict[str, Any]]:
    """The expert layer of decoder layer `i` on `x` [B, S, d] → (output, its loads)."""
    a, m = b.a, b.a.moe
    p = f"l{i}."
    shp = b.g.tensors[x].shape
    t, d, k = shp[0] * shp[1], a.d_model, m.top_k
    x2 = b.one(f"{p}moe.flat", "RESHAPE", [x], [t, d], {"shape": [t, d], "view": True})
    logits = b.gemm(f"{p}moe.router", x2, f"{p}moe.router", m.n_experts, False)
    w, idx = _weights(b, p, x2, logits, t)
    counts = expert_counts(expert_choice(routing, t, m.n_experts, k, i), m.n_experts)
    clist = [int(c) for c in counts]
    active = [e for e, n in enumerate(clist) if n]
    outs = b.op(f"{p}moe.route", "MOE_ROUTE", [idx],
                [(f"{p}moe.rows.{e}", [clist[e]]) for e in active]
                + [(f"{p}moe.pos.{j}", [t]) for j in range(k)],
                {"n_experts": m.n_experts, "counts": clist})
    for tid in outs:
        b.g.tensors[tid].dtype = "int64"
    ys, idle = [], []
    for e, n in enumerate(clist):
        if n == 0:
            idle += [b.const(f"{p}experts.{e}.{w_}.weight", s) for w_, s in
                     (("gate", [d, m.expert_ffn]), ("up", [d, m.expert_ffn]),
                      ("down", [m.expert_ffn, d]))]
            continue
        xe = b.one(f"{p}moe.dispatch.{e}", "GATHER", [x2, outs[active.index(e)]], [n, d],
                   {"axis": 0})
        ys.append(_expert(b, p, e, xe, m.expert_ffn))
    y = ys[0] if len(ys) == 1 else b.one(f"{p}moe.concat", "CONCAT", ys, [t * k, d],
                                         {"axis": 0})
    out = _combine(b, p, y, outs[len(active):], w, t)
    if m.n_shared:
        sh = _expert(b, p, "shared", x2, m.shared_ffn)
        out = b.one(f"{p}moe.shared_add", "ADD", [out, sh], [t, d])
    out = b.one(f"{p}moe.out", "RESHAPE", [out], shp, {"shape": list(shp), "view": True})
    return out, {"layer": i, "tokens_per_expert": clist, "idle_weights": idle}
