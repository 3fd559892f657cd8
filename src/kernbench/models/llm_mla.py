"""DeepSeek's multi-head latent attention as IR nodes, decompressed (called by `llm_graph`).

    q        q_a GEMM (d → q_lora) → RMS_NORM → q_b GEMM (→ H·(rope + nope)), or one q GEMM
    latent   kv_a GEMM (d → kv_lora + rope) → SPLIT → c_kv, k_pe
    k, v     RMS_NORM c_kv → kv_b GEMM (→ H·(nope + v)) → SPLIT per head → k_nope, v
    rope     ROPE on q's first `rope` dims (partial rotary) and on k_pe (one head),
             EXPANDed to every head and CONCATenated before k_nope
    cache    K [B, H, S, rope + nope] and V [B, H, S, v] per head (KV_UPDATE), as Hugging
             Face's implementation caches them — not the compressed latent
    attend   ATTENTION (q/k dim rope + nope, v dim v) → o GEMM (H·v → d)

The rotated dims sit first in each head (q_b's and the key's columns are ordered
[rope, nope] instead of DeepSeek's [nope, rope]: a permutation of weight columns, the
same attention scores).
"""

from __future__ import annotations

from kernbench.models.builder_api import GraphBuilder


def _cache(b: GraphBuilder, p: str, i: int, kind: str, new: str, past_len: int, dim: int) -> str:
    sh, h = b.s, b.a.n_heads
    past = b.act(f"past.{i}.{kind}", [sh.batch, h, past_len, dim], role="kv")
    b.g.inputs.append(past)
    pres = b.act(f"present.{i}.{kind}", [sh.batch, h, past_len + sh.seq_len, dim], role="kv")
    b.g.outputs.append(pres)
    b.op(f"{p}kv_{kind}", "KV_UPDATE", [past, new], [(pres, [])],
         {"axis": 2, "in_place": True},
         {"batch": sh.batch, "heads": h, "seq_new": sh.seq_len,
          "seq_total": past_len + sh.seq_len, "dim": dim})
    return pres


def _q(b: GraphBuilder, p: str, x: str) -> str:
    a, ml = b.a, b.a.mla
    nq = a.n_heads * ml.qk_dim
    if not ml.q_lora_rank:
        return b.gemm(f"{p}q_proj", x, f"{p}q_proj", nq, False)
    q = b.gemm(f"{p}q_a_proj", x, f"{p}q_a_proj", ml.q_lora_rank, False)
    q = b.norm(f"{p}q_a_norm", q, f"{p}q_a_norm")
    return b.gemm(f"{p}q_b_proj", q, f"{p}q_b_proj", nq, False)


def mla_attention(b: GraphBuilder, i: int, x: str) -> str:
    """Attention of decoder layer `i` on the normed input `x` [B, S, d]."""
    a, ml, sh = b.a, b.a.mla, b.s
    p = f"l{i}."
    bs, s, h = sh.batch, sh.seq_len, a.n_heads
    q = b.heads(f"{p}q", _q(b, p, x), h, None)                       # [B, H, S, qk]
    q = b.rope(f"{p}rope_q", q)
    lat = b.gemm(f"{p}kv_a_proj", x, f"{p}kv_a_proj", ml.kv_lora_rank + ml.rope_dim, False)
    ckv, kpe = b.op(f"{p}kv_a.split", "SPLIT", [lat],
                    [(f"{p}c_kv", [bs, s, ml.kv_lora_rank]), (f"{p}k_pe", [bs, s, ml.rope_dim])],
                    {"axis": 2, "sizes": [ml.kv_lora_rank, ml.rope_dim]})
    ckv = b.norm(f"{p}kv_a_norm", ckv, f"{p}kv_a_norm")
    kv = b.gemm(f"{p}kv_b_proj", ckv, f"{p}kv_b_proj", h * (ml.nope_dim + ml.v_dim), False)
    kv = b.one(f"{p}kv.reshape", "RESHAPE", [kv], [bs, s, h, ml.nope_dim + ml.v_dim],
               {"shape": [bs, s, h, ml.nope_dim + ml.v_dim], "view": True})
    knope, v = b.op(f"{p}kv.split", "SPLIT", [kv],
                    [(f"{p}k_nope", [bs, s, h, ml.nope_dim]), (f"{p}v_heads", [bs, s, h, ml.v_dim])],
                    {"axis": 3, "sizes": [ml.nope_dim, ml.v_dim]})
    kpe = b.one(f"{p}k_pe.reshape", "RESHAPE", [kpe], [bs, 1, s, ml.rope_dim],
                {"shape": [bs, 1, s, ml.rope_dim], "view": True})
    kpe = b.rope(f"{p}rope_k", kpe)
    kpe = b.one(f"{p}k_pe.t", "TRANSPOSE", [kpe], [bs, s, 1, ml.rope_dim],
                {"perm": [0, 2, 1, 3], "view": False})
    kpe = b.one(f"{p}k_pe.expand", "EXPAND", [kpe], [bs, s, h, ml.rope_dim],
                {"shape": [bs, s, h, ml.rope_dim]})
    k = b.one(f"{p}k.concat", "CONCAT", [kpe, knope], [bs, s, h, ml.qk_dim], {"axis": 3})
    k = b.one(f"{p}k.transpose", "TRANSPOSE", [k], [bs, h, s, ml.qk_dim],
              {"perm": [0, 2, 1, 3], "view": False})
    v = b.one(f"{p}v.transpose", "TRANSPOSE", [v], [bs, h, s, ml.v_dim],
              {"perm": [0, 2, 1, 3], "view": False})
    past = sh.kv_len
    if past > 0:
        k = _cache(b, p, i, "key", k, past, ml.qk_dim)
        v = _cache(b, p, i, "value", v, past, ml.v_dim)
    o = b.one(f"{p}attn", "ATTENTION", [q, k, v], [bs, h, s, ml.v_dim],
              {"num_heads": h, "num_kv_heads": h, "head_dim": ml.qk_dim,
               "scale": ml.qk_dim ** -0.5, "causal": True, "causal_offset": past,
               "softcap": 0.0, "sliding_window": 0},
              {"batch": bs, "heads": h, "kv_heads": h, "seq_q": s, "seq_kv": past + s,
               "dim": ml.qk_dim})
    o = b.one(f"{p}o.transpose", "TRANSPOSE", [o], [bs, s, h, ml.v_dim],
              {"perm": [0, 2, 1, 3], "view": False})
    o = b.one(f"{p}o.reshape", "RESHAPE", [o], [bs, s, h * ml.v_dim],
              {"shape": [bs, s, h * ml.v_dim], "view": True})
    return b.gemm(f"{p}o_proj", o, f"{p}o_proj", a.d_model, False)
