"""`LlmArch` + shapes → a shape-only IR graph (no ONNX, no torch, no weight values).

The graph has exactly the fused ops the ONNX importer produces for an exported Llama or
GPT-2 (EMBEDDING, RMS_NORM / LAYER_NORM, QKV_PROJ, RESHAPE / TRANSPOSE head views, ROPE,
KV_UPDATE, ATTENTION, GEMM, SILU / GELU, MUL, ADD), so the compiler tiles it the same way.
Every constant is a zero-stride stand-in (`ir.model.shape_only_array`) and
`Graph.metadata["shape_only"]` is true: the compiler keeps weights symbolic, bundles
carry no weight values, and `--verify` is refused.

Shapes: ``batch`` sequences of ``seq_len`` new tokens after ``kv_len`` cached ones.
``kv_len == 0`` is a prefill (causal attention over the new tokens; the LM head runs on
the last position only, as serving engines do to produce the first token);
``kv_len > 0`` is a decode step (or a chunk) with inputs ``past.{i}.key/value``
[batch, kv_heads, cached, head_dim] and outputs ``present.{i}.key/value``. The cache is
updated in place (KV_UPDATE with ``in_place``: only the new rows are written), as a
paged or ring-buffer cache is. A sliding-window layer keeps ``min(kv_len, window)``
cached tokens (a rolling cache); in prefill its window is an attribute of ATTENTION only
(the tiles compute the whole causal block).

Every decoder layer's nodes carry ``metadata["block"] = i`` and ids prefixed ``l{i}.``;
the graph's ``metadata["llm"]`` records the architecture and the shapes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernbench.ir.model import Graph, LayerIR, TensorIR, shape_only_array
from kernbench.ir.qconfig import QConfig, apply_qconfig
from kernbench.models.hf_config import LlmArch
from kernbench.models.llm_mla import mla_attention
from kernbench.models.llm_moe import moe_mlp
from kernbench.models.moe_routing import Routing


@dataclass(frozen=True)
class LlmShape:
    """What one simulated step processes."""

    batch: int = 1
    seq_len: int = 16
    kv_len: int = 0

    @property
    def phase(self) -> str:
        return "decode" if self.kv_len > 0 else "prefill"


class _Builder:
    def __init__(self, arch: LlmArch, shape: LlmShape, routing: Routing) -> None:
        self.a, self.s, self.routing = arch, shape, routing
        self.g = Graph(created_by="kernbench.models.llm_graph")
        self.block: int | None = None
        self.moe_loads: list[dict[str, Any]] = []

    # -------------------------------------------------------------- primitives
    def act(self, tid: str, shape: list[int], dtype: str = "fp32",
            role: str = "intermediate") -> str:
        self.g.tensors[tid] = TensorIR(id=tid, shape=list(shape), dtype=dtype, role=role)
        return tid

    def const(self, tid: str, shape: list[int], dtype: str = "fp32") -> str:
        if tid not in self.g.tensors:
            self.g.tensors[tid] = TensorIR(id=tid, shape=list(shape), dtype=dtype,
                                           role="weight", const=True)
            self.g.weights[tid] = shape_only_array(shape, np.float32)
        return tid

    def op(self, nid: str, op_type: str, ins: list[str], outs: list[tuple[str, list[int]]],
           attrs: dict[str, Any] | None = None, shape: dict[str, int] | None = None
           ) -> list[str]:
        """Append a node; `outs` are (tensor id, shape) pairs created as fp32 activations
        unless they exist already (graph outputs made beforehand)."""
        out_ids = []
        for tid, shp in outs:
            if tid not in self.g.tensors:
                self.act(tid, shp)
            out_ids.append(tid)
        meta = {"block": self.block} if self.block is not None else {}
        self.g.nodes.append(LayerIR(id=nid, op_type=op_type, inputs=ins, outputs=out_ids,
                                    attributes=attrs or {}, shape=shape or {},
                                    metadata=meta))
        return out_ids

    def one(self, nid: str, op_type: str, ins: list[str], shp: list[int],
            attrs: dict[str, Any] | None = None, shape: dict[str, int] | None = None) -> str:
        return self.op(nid, op_type, ins, [(f"{nid}.y", shp)], attrs, shape)[0]

    # -------------------------------------------------------------- pieces
    def norm(self, nid: str, x: str, wname: str, width: int | None = None) -> str:
        a = self.a
        shp = self.g.tensors[x].shape
        width = width or shp[-1]
        w = self.const(f"{wname}.weight", [width])
        ins = [x, w]
        op = "RMS_NORM"
        if a.norm == "layer":
            ins.append(self.const(f"{wname}.bias", [width]))
            op = "LAYER_NORM"
        rows = int(np.prod(shp[:-1]))
        return self.one(nid, op, ins, shp, {"axis": len(shp) - 1, "eps": a.norm_eps},
                        {"rows": rows, "cols": width})

    def gemm(self, nid: str, x: str, wname: str, n_out: int, bias: bool) -> str:
        shp = self.g.tensors[x].shape
        k = shp[-1]
        ins = [x, self.const(f"{wname}.weight", [k, n_out])]
        if bias:
            ins.append(self.const(f"{wname}.bias", [n_out]))
        m = int(np.prod(shp[:-1]))
        return self.one(nid, "GEMM", ins, shp[:-1] + [n_out], {},
                        {"M": m, "N": n_out, "K": k})

    def heads(self, nid: str, x: str, h: int, qk_norm: str | None) -> str:
        """[B, S, h·hd] → [B, h, S, hd] (RESHAPE view, optional per-head norm, TRANSPOSE)."""
        b, s, hd = self.s.batch, self.s.seq_len, self.a.head_dim
        y = self.one(f"{nid}.reshape", "RESHAPE", [x], [b, s, h, hd],
                     {"shape": [b, s, h, hd], "view": True})
        if qk_norm:
            y = self.norm(f"{nid}.norm", y, qk_norm, hd)
        return self.one(f"{nid}.transpose", "TRANSPOSE", [y], [b, h, s, hd],
                        {"perm": [0, 2, 1, 3], "view": False})

    def rope(self, nid: str, x: str) -> str:
        s, rd = self.s.seq_len, self.a.rotary_dim
        cos = self.const("rope.cos", [1, 1, s, rd])
        sin = self.const("rope.sin", [1, 1, s, rd])
        return self.one(nid, "ROPE", [x, cos, sin], self.g.tensors[x].shape,
                        {"interleaved": False, "rotary_dim": rd})

    def cache(self, p: str, i: int, kind: str, new: str, past_len: int) -> str:
        b, s, hkv, hd = self.s.batch, self.s.seq_len, self.a.n_kv_heads, self.a.head_dim
        past = self.act(f"past.{i}.{kind}", [b, hkv, past_len, hd], role="kv")
        self.g.inputs.append(past)
        pres = self.act(f"present.{i}.{kind}", [b, hkv, past_len + s, hd], role="kv")
        self.g.outputs.append(pres)
        self.op(f"{p}kv_{kind}", "KV_UPDATE", [past, new], [(pres, [])],
                {"axis": 2, "in_place": True},
                {"batch": b, "heads": hkv, "seq_new": s, "seq_total": past_len + s, "dim": hd})
        return pres

    def attention(self, i: int, x: str) -> str:
        a, sh = self.a, self.s
        if a.mla is not None:
            return mla_attention(self, i, x)
        p = f"l{i}."
        b, s, hd = sh.batch, sh.seq_len, a.head_dim
        nq, nkv = a.n_heads * hd, a.n_kv_heads * hd
        ws = [self.const(f"{p}q_proj.weight", [a.d_model, nq]),
              self.const(f"{p}k_proj.weight", [a.d_model, nkv]),
              self.const(f"{p}v_proj.weight", [a.d_model, nkv])]
        if a.qkv_bias:
            ws += [self.const(f"{p}q_proj.bias", [nq]), self.const(f"{p}k_proj.bias", [nkv]),
                   self.const(f"{p}v_proj.bias", [nkv])]
        q, k, v = self.op(f"{p}qkv", "QKV_PROJ", [x, *ws],
                          [(f"{p}q", [b, s, nq]), (f"{p}k", [b, s, nkv]), (f"{p}v", [b, s, nkv])],
                          {"num_heads": a.n_heads, "num_kv_heads": a.n_kv_heads, "head_dim": hd},
                          {"batch": b, "seq": s, "heads": a.n_heads, "kv_heads": a.n_kv_heads,
                           "dim": hd, "M": b * s, "K": a.d_model})
        qn = f"{p}q_norm" if a.qk_norm else None
        kn = f"{p}k_norm" if a.qk_norm else None
        q = self.heads(f"{p}q", q, a.n_heads, qn)
        k = self.heads(f"{p}k", k, a.n_kv_heads, kn)
        v = self.heads(f"{p}v", v, a.n_kv_heads, None)
        if a.positions == "rope":
            q, k = self.rope(f"{p}rope_q", q), self.rope(f"{p}rope_k", k)
        window = a.window_of(i)
        past_len = min(sh.kv_len, window) if window else sh.kv_len
        if sh.kv_len > 0:
            k = self.cache(p, i, "key", k, past_len)
            v = self.cache(p, i, "value", v, past_len)
        o = self.one(f"{p}attn", "ATTENTION", [q, k, v], [b, a.n_heads, s, hd],
                     {"num_heads": a.n_heads, "num_kv_heads": a.n_kv_heads, "head_dim": hd,
                      "scale": a.attn_scale or hd ** -0.5, "causal": True,
                      "causal_offset": past_len if sh.kv_len > 0 else 0,
                      "softcap": a.attn_softcap, "sliding_window": window},
                     {"batch": b, "heads": a.n_heads, "kv_heads": a.n_kv_heads, "seq_q": s,
                      "seq_kv": past_len + s, "dim": hd})
        o = self.one(f"{p}o.transpose", "TRANSPOSE", [o], [b, s, a.n_heads, hd],
                     {"perm": [0, 2, 1, 3], "view": False})
        o = self.one(f"{p}o.reshape", "RESHAPE", [o], [b, s, nq],
                     {"shape": [b, s, nq], "view": True})
        return self.gemm(f"{p}o_proj", o, f"{p}o_proj", a.d_model, a.o_bias)

    def mlp(self, i: int, x: str) -> str:
        a = self.a
        p = f"l{i}."
        if a.moe is not None and a.moe.is_moe(i):
            out, loads = moe_mlp(self, i, x, self.routing)
            self.moe_loads.append(loads)
            return out
        shp = self.g.tensors[x].shape[:-1] + [a.ffn]
        if a.mlp == "gelu":
            h = self.gemm(f"{p}fc", x, f"{p}fc", a.ffn, a.mlp_bias)
            h = self.one(f"{p}act", "GELU", [h], shp, {"approximate": "tanh"})
            return self.gemm(f"{p}down", h, f"{p}down", a.d_model, a.mlp_bias)
        g = self.gemm(f"{p}gate", x, f"{p}gate", a.ffn, a.mlp_bias)
        if a.mlp == "silu_glu":
            g = self.one(f"{p}act", "SILU", [g], shp)
        else:
            g = self.one(f"{p}act", "GELU", [g], shp, {"approximate": "tanh"})
        u = self.gemm(f"{p}up", x, f"{p}up", a.ffn, a.mlp_bias)
        h = self.one(f"{p}glu", "MUL", [g, u], shp)
        return self.gemm(f"{p}down", h, f"{p}down", a.d_model, a.mlp_bias)

    def layer(self, i: int, x: str) -> str:
        a = self.a
        p = f"l{i}."
        self.block = i
        shp = self.g.tensors[x].shape
        h = self.norm(f"{p}ln_attn", x, f"{p}ln_attn")
        attn = self.attention(i, h)
        if a.sandwich_norm:
            attn = self.norm(f"{p}ln_attn_post", attn, f"{p}ln_attn_post")
        if a.parallel:  # x + attn(ln1 x) + mlp(ln2 x)
            h2 = h if a.shared_norm else self.norm(f"{p}ln_mlp", x, f"{p}ln_mlp")
            m = self.mlp(i, h2)
            y = self.one(f"{p}res_attn", "ADD", [x, attn], shp)
            out = self.one(f"{p}res_mlp", "ADD", [y, m], shp)
        else:
            y = self.one(f"{p}res_attn", "ADD", [x, attn], shp)
            m = self.mlp(i, self.norm(f"{p}ln_mlp", y, f"{p}ln_mlp"))
            if a.sandwich_norm:
                m = self.norm(f"{p}ln_mlp_post", m, f"{p}ln_mlp_post")
            out = self.one(f"{p}res_mlp", "ADD", [y, m], shp)
        self.block = None
        return out


def build_llm_graph(arch: LlmArch, shape: LlmShape, qconfig: QConfig | None = None,
                    routing: Routing | None = None) -> Graph:
    """The whole model as a shape-only IR graph (see the module docstring); an MoE model's
    experts are chosen by `routing` (default: uniform, seed 0; `models.moe_routing`)."""
    a, sh = arch, shape
    routing = routing or Routing()
    bld = _Builder(a, sh, routing)
    g = bld.g
    b, s, d = sh.batch, sh.seq_len, a.d_model
    ids = bld.act("input_ids", [b, s], "int64", role="activation")
    g.inputs.append(ids)
    table = bld.const("embed.weight", [a.vocab, d])
    x = bld.one("embed", "EMBEDDING", [ids, table], [b, s, d], {"gather_rows": True})
    if a.positions == "learned":
        pos = bld.const("embed_positions", [1, s, d])
        x = bld.one("embed_pos", "ADD", [x, pos], [b, s, d])
    if a.model_type in ("gemma", "gemma2"):  # embeddings scaled by sqrt(d_model)
        x = bld.one("embed_scale", "MUL", [x, bld.const("embed_scale.c", [1])], [b, s, d])
    for i in range(a.n_layers):
        x = bld.layer(i, x)
    x = bld.norm("ln_final", x, "ln_final")
    rows = s
    if sh.kv_len == 0 and s > 1:  # prefill: logits of the last position only
        x = bld.one("last_token", "SLICE", [x], [b, 1, d],
                    {"starts": [0, s - 1, 0], "ends": [b, s, d], "steps": [1, 1, 1]})
        rows = 1
    logits = bld.gemm("lm_head", x, "lm_head", a.vocab, False)
    if a.final_softcap:
        logits = bld.one("logit_softcap", "ELEMENTWISE", [logits], [b, rows, a.vocab],
                         {"op": "tanh"})
    g.outputs.insert(0, logits)
    g.metadata.update({
        "model_name": a.name, "producer_name": "kernbench.models.llm_graph",
        "shape_only": True, "prequantized": False,
        "tied_weights": {"lm_head.weight": "embed.weight"} if a.tied else {},
        "llm": {"arch": dataclasses.asdict(a), "batch": b, "seq_len": s,
                "kv_len": sh.kv_len, "phase": sh.phase, "blocks": a.n_layers},
    })
    if a.moe is not None:
        g.metadata["llm"]["moe"] = {"routing": dataclasses.asdict(routing),
                                    "n_experts": a.moe.n_experts, "top_k": a.moe.top_k,
                                    "layers": bld.moe_loads}
    apply_qconfig(g, qconfig)
    g.rebuild_links()
    return g


def weight_params(g: Graph) -> int:
    """Parameters held by the graph's weight constants, tied tensors counted once."""
    tied = set((g.metadata.get("tied_weights") or {}).keys())
    return sum(math.prod(t.shape) for tid, t in g.tensors.items()
               if t.const and t.role == "weight" and tid not in tied
               and not tid.startswith("rope.") and tid != "embed_scale.c")
