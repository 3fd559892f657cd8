"""GPT-2- and Llama-style ONNX models of any shape, built with onnx.helper.

The committed test models (tests/models/*.onnx) are exported once with fixed shapes
(seq 16, past 16). These builders write the same node patterns PyTorch's dynamo exporter
writes (so kernbench's importer fuses them the same way) for any number of new tokens
(`seq`) and any KV-cache length (`kv_len`):

- ``kv_len == 0``: prefill. Input ``input_ids`` int64[batch, seq]; output ``logits``
  float32[batch, seq, vocab]; causal attention over the seq tokens.
- ``kv_len > 0``: decode (or a chunk of ``seq`` new tokens after ``kv_len`` cached ones).
  Extra inputs ``past_key_values.{i}.key/value`` float32[batch, kv_heads, kv_len, head_dim],
  extra outputs ``present.{i}.key/value`` = Concat(past, new, axis=2)
  float32[batch, kv_heads, kv_len + seq, head_dim]; token j (position kv_len + j) attends to
  every cached key and to the new keys 0..j.

Weights are random (normal, std 0.02, a fixed seed) and do not depend on the shapes:
the same seed gives the same layer weights for every seq / kv_len.

    from kernbench.models.builders import model_for
    onnx.save(model_for("llama", seq_len=1, kv_len=512), "llama_decode_512.onnx")
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kernbench.errors import InputError

OPSET = 18
IR_VERSION = 9
STD = 0.02
NEG = float(np.finfo(np.float32).min)  # the exporter's additive-mask fill
INT64_MAX = 9223372036854775807


@dataclass(frozen=True)
class ModelConfig:
    family: str  # "gpt2" | "llama"
    n_layer: int
    d: int
    heads: int
    vocab: int
    kv_heads: int = 0  # llama: 0 -> heads
    ffn: int = 0  # llama: MLP width


MODELS: dict[str, ModelConfig] = {
    # same configs as the committed tests/models/{gpt2,llama}*.onnx
    "gpt2": ModelConfig("gpt2", n_layer=2, d=64, heads=4, vocab=256),
    "llama": ModelConfig("llama", n_layer=2, d=64, heads=4, vocab=256, kv_heads=2, ffn=128),
    # GPT-2 small's body (vocab cut to 2048 to keep the weights light)
    "gpt2-small": ModelConfig("gpt2", n_layer=12, d=768, heads=12, vocab=2048),
}


class _Builder:
    """Collects nodes, initializers and graph I/O; names are unique by a counter."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._consts: dict[tuple, str] = {}
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def init(self, name: str, a: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def const(self, value, dtype=np.float32) -> str:  # noqa: ANN001
        """A small constant, shared by value (like the exporter's val_N)."""
        a = np.asarray(value, dtype)
        key = (a.dtype.str, a.shape, a.tobytes())
        if key not in self._consts:
            self._consts[key] = self.init(self.name("val"), a)
        return self._consts[key]

    def ints(self, *v: int) -> str:
        return self.const(list(v), np.int64)

    def weight(self, name: str, shape: tuple[int, ...]) -> str:
        return self.init(name, (self.rng.standard_normal(shape) * STD).astype(np.float32))

    def op(self, op_type: str, inputs: list[str], base: str | None = None, n_out: int = 1,
           outputs: list[str] | None = None, **attrs) -> str | list[str]:  # noqa: ANN003
        outs = outputs or [self.name(base or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type),
                                           **attrs))
        return outs[0] if n_out == 1 else outs

    def add_input(self, name: str, elem: int, shape: list[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def add_output(self, name: str, elem: int, shape: list[int]) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem, shape))

    def model(self, graph_name: str) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, graph_name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="kernbench.models.builders")
        m.ir_version = IR_VERSION
        return m


def _check(n_layer: int, d: int, heads: int, kv_heads: int, seq: int, kv_len: int,
           vocab: int, batch: int = 1) -> None:
    for nm, v in (("n_layer", n_layer), ("d", d), ("heads", heads), ("kv_heads", kv_heads),
                  ("seq_len", seq), ("vocab", vocab), ("batch", batch)):
        if v < 1:
            raise InputError(f"must be >= 1, got {v}", field=nm)
    if kv_len < 0:
        raise InputError(f"must be >= 0, got {kv_len}", field="kv_len")
    if d % heads:
        raise InputError(f"d={d} is not a multiple of heads={heads}", field="heads")
    if heads % kv_heads:
        raise InputError(f"heads={heads} is not a multiple of kv_heads={kv_heads}",
                         field="kv_heads")


def causal_mask(seq: int, kv_len: int) -> np.ndarray:
    """Additive mask [1, 1, seq, kv_len + seq]: query j (position kv_len + j) sees keys
    0..kv_len + j."""
    t = kv_len + seq
    q_pos = kv_len + np.arange(seq)[:, None]
    allowed = np.arange(t)[None, :] <= q_pos
    return np.where(allowed, 0.0, NEG).astype(np.float32)[None, None]


def _kv_io(b: _Builder, i: int, kv_heads: int, kv_len: int, seq: int, hd: int,
           k_new: str, v_new: str, bs: int = 1) -> tuple[str, str]:
    """Decode: Concat(past, new, axis=2) -> present (graph outputs); prefill: new k/v."""
    if kv_len == 0:
        return k_new, v_new
    pres = []
    for kind, new in (("key", k_new), ("value", v_new)):
        past = b.add_input(f"past_key_values.{i}.{kind}", TensorProto.FLOAT,
                           [bs, kv_heads, kv_len, hd])
        out = f"present.{i}.{kind}"
        b.op("Concat", [past, new], outputs=[out], axis=-2)
        b.add_output(out, TensorProto.FLOAT, [bs, kv_heads, kv_len + seq, hd])
        pres.append(out)
    return pres[0], pres[1]


def _sdpa(b: _Builder, q: str, k: str, v: str, heads: int, t: int, hd: int, mask: str,
          bs: int = 1) -> str:
    """torch's decomposed scaled_dot_product_attention as the exporter writes it: K^T via
    Reshape/Transpose/Reshape, sqrt(scale) on both operands, additive mask, Softmax,
    Where(IsNaN(p), 0, p), MatMul with V. q/k/v are [1, heads, s, hd]."""
    k3 = b.op("Reshape", [k, b.ints(-1, t, hd)], "val")
    kt = b.op("Transpose", [k3], "val", perm=[0, 2, 1])
    kt = b.op("Reshape", [kt, b.ints(bs, heads, hd, t)], "val")
    s = b.const(1.0 / math.sqrt(math.sqrt(hd)))
    qs = b.op("Mul", [q, s], "val")
    ks = b.op("Mul", [kt, s], "val")
    sc = b.op("MatMul", [qs, ks], "val")
    sc = b.op("Add", [sc, mask], "val")
    p = b.op("Softmax", [sc], "val", axis=-1)
    nan = b.op("IsNaN", [p], "val")
    p = b.op("Where", [nan, b.const(0.0), p], "val")
    return b.op("MatMul", [p, v], "scaled_dot_product_attention")


def _merge_heads(b: _Builder, ctx: str, seq: int, hd: int, d: int, flat: bool,
                 bs: int = 1) -> str:
    x = b.op("Reshape", [ctx, b.ints(bs, -1, seq, hd)], "view", allowzero=1)
    x = b.op("Transpose", [x], "transpose", perm=[0, 2, 1, 3])
    shape = b.ints(bs * seq, d) if flat else b.ints(bs, seq, -1)
    return b.op("Reshape", [x, shape], "view", allowzero=1)


def _split_heads(b: _Builder, x: str, seq: int, hd: int, bs: int = 1) -> str:
    x = b.op("Reshape", [x, b.ints(bs, seq, -1, hd)], "view", allowzero=1)
    return b.op("Transpose", [x], "transpose", perm=[0, 2, 1, 3])


def build_gpt2(n_layer: int = 2, d: int = 64, heads: int = 4, seq: int = 16, kv_len: int = 0,
               vocab: int = 256, seed: int = 0, batch: int = 1) -> onnx.ModelProto:
    """GPT2LMHeadModel-style graph (tied lm_head, tanh GELU, LayerNorm eps 1e-5), for
    `batch` sequences."""
    _check(n_layer, d, heads, heads, seq, kv_len, vocab, batch)
    bs = batch
    b = _Builder(seed)
    hd, t = d // heads, kv_len + seq
    ids = b.add_input("input_ids", TensorProto.INT64, [bs, seq])
    wte_a = (b.rng.standard_normal((vocab, d)) * STD).astype(np.float32)
    wte = b.init("transformer.wte.weight", wte_a)
    # position embeddings of positions kv_len..t-1 (constant-folded by the exporter);
    # their own generator so that every shape sees the same table
    wpe = (np.random.default_rng([seed, 1]).standard_normal((t, d)) * STD).astype(np.float32)
    pos = b.init("transformer.wpe.positions", wpe[kv_len:][None])
    mask = b.init("causal_mask", causal_mask(seq, kv_len))
    h = b.op("Add", [b.op("Gather", [wte, ids], "embedding", axis=0), pos], "add")

    def ln(x: str, nm: str) -> str:
        g = b.init(nm + ".weight", (1 + b.rng.standard_normal(d) * STD).astype(np.float32))
        be = b.init(nm + ".bias", (b.rng.standard_normal(d) * STD).astype(np.float32))
        return b.op("LayerNormalization", [x, g, be], "layer_norm", axis=-1, epsilon=1e-5,
                    stash_type=1)

    def conv1d(x: str, nm: str, n_in: int, n_out: int) -> str:
        """HF Conv1D as exported: Reshape [-1, n_in] -> Gemm(+bias) -> Reshape [1, seq, n]."""
        x = b.op("Reshape", [x, b.ints(-1, n_in)], "view", allowzero=1)
        y = b.op("Gemm", [x, b.weight(nm + ".weight", (n_in, n_out)),
                          b.weight(nm + ".bias", (n_out,))], "addmm")
        return b.op("Reshape", [y, b.ints(bs, seq, n_out)], "view", allowzero=1)

    for i in range(n_layer):
        p = f"transformer.h.{i}."
        x = ln(h, p + "ln_1")
        qkv = conv1d(x, p + "attn.c_attn", d, 3 * d)
        q, k, v = b.op("Split", [qkv], "split", n_out=3, axis=2, num_outputs=3)
        k, v = _split_heads(b, k, seq, hd, bs), _split_heads(b, v, seq, hd, bs)
        q = _split_heads(b, q, seq, hd, bs)
        k, v = _kv_io(b, i, heads, kv_len, seq, hd, k, v, bs)
        ctx = _sdpa(b, q, k, v, heads, t, hd, mask, bs)
        x = _merge_heads(b, ctx, seq, hd, d, True, bs)
        y = b.op("Gemm", [x, b.weight(p + "attn.c_proj.weight", (d, d)),
                          b.weight(p + "attn.c_proj.bias", (d,))], "addmm")
        y = b.op("Reshape", [y, b.ints(bs, seq, d)], "view", allowzero=1)
        h = b.op("Add", [y, h], "add")
        x = ln(h, p + "ln_2")
        f = conv1d(x, p + "mlp.c_fc", d, 4 * d)
        half = b.op("Mul", [f, b.const(0.5)], "mul")
        cube = b.op("Mul", [b.op("Pow", [f, b.const(3.0)], "pow"), b.const(0.044715)], "mul")
        inner = b.op("Mul", [b.op("Add", [f, cube], "add"), b.const(math.sqrt(2 / math.pi))],
                     "mul")
        th = b.op("Add", [b.op("Tanh", [inner], "tanh"), b.const(1.0)], "add")
        g = b.op("Mul", [half, th], "mul")
        y = conv1d(g, p + "mlp.c_proj", 4 * d, d)
        h = b.op("Add", [h, y], "add")
    x = ln(h, "transformer.ln_f")
    lm = b.init("lm_head.weight.T", np.ascontiguousarray(wte_a.T))  # tied to wte
    b.op("MatMul", [x, lm], outputs=["logits"])
    b.add_output("logits", TensorProto.FLOAT, [bs, seq, vocab])
    _order_outputs(b)
    return b.model(f"gpt2_{'decode' if kv_len else 'prefill'}")


def rope_tables(seq: int, kv_len: int, hd: int, theta: float = 10000.0):  # noqa: ANN201
    """cos, sin [1, 1, seq, hd] for positions kv_len..kv_len+seq-1 (rotate-half layout)."""
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(kv_len, kv_len + seq, dtype=np.float64)[:, None] * inv[None]
    emb = np.concatenate([ang, ang], axis=-1)
    return (np.cos(emb).astype(np.float32)[None, None],
            np.sin(emb).astype(np.float32)[None, None])


def build_llama(n_layer: int = 2, d: int = 64, heads: int = 4, kv_heads: int = 2,
                ffn: int = 128, seq: int = 16, kv_len: int = 0, vocab: int = 256,
                seed: int = 0, batch: int = 1) -> onnx.ModelProto:
    """LlamaForCausalLM-style graph: RMSNorm (eps 1e-6), rotate-half RoPE (theta 1e4),
    grouped-query attention (kv_heads < heads), SiLU-gated MLP, untied lm_head."""
    _check(n_layer, d, heads, kv_heads, seq, kv_len, vocab, batch)
    bs = batch
    if ffn < 1:
        raise InputError(f"must be >= 1, got {ffn}", field="ffn")
    b = _Builder(seed)
    hd, t, rep = d // heads, kv_len + seq, heads // kv_heads
    if hd % 2:
        raise InputError(f"head_dim={hd} must be even for RoPE", field="d")
    ids = b.add_input("input_ids", TensorProto.INT64, [bs, seq])
    emb = b.weight("model.embed_tokens.weight", (vocab, d))
    cos_a, sin_a = rope_tables(seq, kv_len, hd)
    cos, sin = b.init("unsqueeze_cos", cos_a), b.init("unsqueeze_sin", sin_a)
    mask = b.init("causal_mask", causal_mask(seq, kv_len))
    h = b.op("Gather", [emb, ids], "embedding", axis=0)

    def rms(x: str, nm: str) -> str:
        w = b.init(nm + ".weight", (1 + b.rng.standard_normal(d) * STD).astype(np.float32))
        sq = b.op("Pow", [x, b.const(2.0)], "pow")
        m = b.op("ReduceMean", [sq, b.ints(-1)], "mean", keepdims=1, noop_with_empty_axes=0)
        r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [m, b.const(1e-6)], "add")], "val")],
                 "rsqrt")
        return b.op("Mul", [w, b.op("Mul", [x, r], "mul")], "mul")

    def rope(x: str) -> str:
        c = b.op("Mul", [x, cos], "mul")
        x1 = b.op("Slice", [x, b.ints(0), b.ints(hd // 2), b.ints(3), b.ints(1)], "slice")
        x2 = b.op("Slice", [x, b.ints(hd // 2), b.ints(INT64_MAX), b.ints(3), b.ints(1)],
                  "slice")
        rh = b.op("Concat", [b.op("Neg", [x2], "neg"), x1], "cat", axis=-1)
        return b.op("Add", [c, b.op("Mul", [rh, sin], "mul")], "add")

    def repeat_kv(x: str) -> str:
        """[1, kvh, t, hd] -> [1, heads, t, hd] by Unsqueeze/Expand/Reshape (repeat_kv)."""
        if rep == 1:
            return x
        x = b.op("Unsqueeze", [x, b.ints(2)], "unsqueeze")
        x = b.op("Expand", [x, b.ints(bs, kv_heads, rep, t, hd)], "expand")
        return b.op("Reshape", [x, b.ints(bs, heads, t, hd)], "_unsafe_view", allowzero=1)

    for i in range(n_layer):
        p = f"model.layers.{i}."
        x = rms(h, p + "input_layernorm")
        q = _split_heads(b, b.op("MatMul", [x, b.weight(p + "self_attn.q_proj", (d, d))],
                                 "linear"), seq, hd, bs)  # fmt: skip
        k = _split_heads(b, b.op("MatMul", [x, b.weight(p + "self_attn.k_proj",
                                                        (d, kv_heads * hd))], "linear"),
                         seq, hd, bs)  # fmt: skip
        v = _split_heads(b, b.op("MatMul", [x, b.weight(p + "self_attn.v_proj",
                                                        (d, kv_heads * hd))], "linear"),
                         seq, hd, bs)  # fmt: skip
        q, k = rope(q), rope(k)
        k, v = _kv_io(b, i, kv_heads, kv_len, seq, hd, k, v, bs)
        ctx = _sdpa(b, q, repeat_kv(k), repeat_kv(v), heads, t, hd, mask, bs)
        x = _merge_heads(b, ctx, seq, hd, d, False, bs)
        y = b.op("MatMul", [x, b.weight(p + "self_attn.o_proj", (d, d))], "linear")
        h = b.op("Add", [h, y], "add")
        x = rms(h, p + "post_attention_layernorm")
        gate = b.op("MatMul", [x, b.weight(p + "mlp.gate_proj", (d, ffn))], "linear")
        silu = b.op("Mul", [gate, b.op("Sigmoid", [gate], "val")], "silu")
        up = b.op("MatMul", [x, b.weight(p + "mlp.up_proj", (d, ffn))], "linear")
        y = b.op("MatMul", [b.op("Mul", [silu, up], "mul"),
                            b.weight(p + "mlp.down_proj", (ffn, d))], "linear")  # fmt: skip
        h = b.op("Add", [h, y], "add")
    x = rms(h, "model.norm")
    b.op("MatMul", [x, b.weight("lm_head.weight.T", (d, vocab))], outputs=["logits"])
    b.add_output("logits", TensorProto.FLOAT, [bs, seq, vocab])
    _order_outputs(b)
    return b.model(f"llama_{'decode' if kv_len else 'prefill'}")


def _order_outputs(b: _Builder) -> None:
    """logits first, then present.{i}.key/value (the exporter's order)."""
    b.outputs.sort(key=lambda o: (o.name != "logits",))


def model_for(name: str, seq_len: int = 16, kv_len: int = 0, seed: int = 0,
              batch: int = 1) -> onnx.ModelProto:
    """A named model ("gpt2", "llama", "gpt2-small") built for `batch` sequences of seq_len
    new tokens after a KV cache of kv_len tokens (0 = prefill)."""
    cfg = MODELS.get(name)
    if cfg is None:
        raise InputError(f"unknown model name '{name}' (known: {', '.join(MODELS)})")
    if cfg.family == "gpt2":
        return build_gpt2(cfg.n_layer, cfg.d, cfg.heads, seq_len, kv_len, cfg.vocab, seed,
                          batch)
    return build_llama(cfg.n_layer, cfg.d, cfg.heads, cfg.kv_heads, cfg.ffn, seq_len, kv_len,
                       cfg.vocab, seed, batch)


__all__ = ["MODELS", "ModelConfig", "build_gpt2", "build_llama", "causal_mask", "model_for",
           "rope_tables"]
