"""Hugging Face `config.json` → `LlmArch`, the architecture facts a shape-only model needs.

Each supported `model_type` maps the config's own key names (as transformers writes them)
onto one `LlmArch`; `kernbench.models.llm_graph.build_llm_graph` turns that into IR.
Nothing here reads weights: a config file is all there is.

Supported model types and what they bring:

| model_type | norm | MLP | attention | notes |
| --- | --- | --- | --- | --- |
| llama, mistral, qwen2, qwen3, phi3 | RMS | SiLU-gated | GQA, RoPE | qwen2: q/k/v bias; qwen3: q/k RMS norm; mistral / phi3 / qwen2 (use_sliding_window): sliding window |
| gemma, gemma2 | RMS | GELU(tanh)-gated | GQA/MQA, RoPE | tied embeddings; gemma2: pre/post norms, logit soft-capping, sliding window on even layers |
| gpt2 | LayerNorm | GELU(tanh) | MHA, learned positions | biases, tied embeddings |
| gpt_neox | LayerNorm | GELU | MHA, partial RoPE (rotary_pct) | parallel residual |
| falcon | LayerNorm | GELU | MQA / GQA, RoPE | parallel attention + MLP; alibi is refused |
| mixtral, qwen3_moe | RMS | SiLU-gated experts (`models.hf_moe`) | GQA, RoPE | qwen3_moe: q/k RMS norm |
| deepseek_v3 | RMS | SiLU-gated routed + shared experts, first layers dense | MLA (`models.hf_moe`) | |

Errors (unknown model_type, missing or ill-typed key, unreadable file) are one
`InputError` line naming the file and the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernbench.errors import InputError
from kernbench.models.hf_moe import MlaArch, MoeArch, mla_of, moe_of

MAX_CONFIG_BYTES = 1 << 20
MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "gpt2",
               "gpt_neox", "falcon", "mixtral", "qwen3_moe", "deepseek_v3")
MOE_TYPES = ("mixtral", "qwen3_moe", "deepseek_v3")


@dataclass(frozen=True)
class LlmArch:
    """A decoder-only transformer, as far as timing is concerned."""

    model_type: str
    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    norm: str = "rms"                 # "rms" | "layer"
    norm_eps: float = 1e-6
    mlp: str = "silu_glu"             # "silu_glu" | "gelu_glu" | "gelu"
    positions: str = "rope"           # "rope" | "learned"
    rotary_dim: int = 0               # rope: rotated dims per head (partial rotary)
    max_positions: int = 0            # learned positions: table rows
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tied: bool = False                # lm_head shares the embedding table
    parallel: bool = False            # attention and MLP read the same input (neox, falcon)
    shared_norm: bool = False         # parallel blocks with one norm (old falcon)
    qk_norm: bool = False             # RMS norm on q and k per head (qwen3)
    sandwich_norm: bool = False       # extra post-attention / post-MLP norms (gemma2)
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    attn_scale: float = 0.0           # 0: head_dim ** -0.5
    sliding_window: int = 0           # 0: none
    sliding_layers: str = "all"       # "all" | "even" (gemma2)
    moe: MoeArch | None = None        # expert layers (mixtral, qwen3_moe, deepseek_v3)
    mla: MlaArch | None = None        # multi-head latent attention (deepseek_v3)

    def window_of(self, layer: int) -> int:
        """The sliding window of decoder layer `layer` (0 = attends to everything)."""
        if not self.sliding_window:
            return 0
        if self.sliding_layers == "even" and layer % 2:
            return 0
        return self.sliding_window


class _Keys:
    """Typed access to a config dict; every problem names the file and the key."""

    def __init__(self, d: dict[str, Any], file: str) -> None:
        self.d, self.file = d, file

    def _err(self, key: str, reason: str) -> InputError:
        return InputError(reason, file=self.file, field=key)

    def int(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        v = self.d.get(key, default)
        if v is None:
            raise self._err(key, f"missing key '{key}'")
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self._err(key, f"'{key}' must be an integer >= {minimum}, got {v!r}")
        return v

    def opt_int(self, key: str) -> int | None:
        return None if self.d.get(key) is None else self.int(key)

    def float(self, key: str, default: float | None = None) -> float:
        v = self.d.get(key, default)
        if v is None:
            raise self._err(key, f"missing key '{key}'")
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self._err(key, f"'{key}' must be a number, got {v!r}")
        return float(v)

    def bool(self, key: str, default: bool) -> bool:
        v = self.d.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self._err(key, f"'{key}' must be true or false, got {v!r}")
        return v

    def str(self, key: str, default: str) -> str:
        v = self.d.get(key, default)
        if not isinstance(v, str):
            raise self._err(key, f"'{key}' must be a string, got {v!r}")
        return v


def config_path(path: Path) -> Path:
    """`path` itself, or `path/config.json` for a directory."""
    path = Path(path)
    return path / "config.json" if path.is_dir() else path


def is_hf_config(path: Path) -> bool:
    """True for a `*.json` file or a directory holding `config.json` that is not a kernbench
    ir.json (those have a top-level 'graph')."""
    p = config_path(path)
    if p.suffix != ".json" or not p.is_file() or p.name == "ir.json":
        return False
    try:
        head = p.read_text(encoding="utf-8", errors="replace")[:MAX_CONFIG_BYTES]
        d = json.loads(head)
    except (OSError, ValueError):
        return p.name == "config.json"  # a broken config.json still reports as one
    return isinstance(d, dict) and "graph" not in d and ("model_type" in d
                                                          or "architectures" in d)


def load_hf_config(path: Path) -> LlmArch:
    """Read and map a config.json (see the module table)."""
    p = config_path(path)
    file = str(p)
    try:
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise InputError(f"larger than {MAX_CONFIG_BYTES} bytes", file=file)
        d = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror})", file=file) from None
    except ValueError as e:
        raise InputError(f"not valid JSON ({e})", file=file) from None
    if not isinstance(d, dict):
        raise InputError("top level must be a JSON object", file=file)
    mt = d.get("model_type")
    if mt is None:
        raise InputError("missing key 'model_type'", file=file, field="model_type")
    if mt not in MODEL_TYPES:
        raise InputError(f"unsupported model_type {mt!r} (supported: {', '.join(MODEL_TYPES)})",
                         file=file, field="model_type")
    k = _Keys(d, file)
    name = p.parent.name if p.name == "config.json" else p.stem
    if mt == "gpt2":
        return _gpt2(k, name)
    if mt == "gpt_neox":
        return _neox(k, name)
    if mt == "falcon":
        return _falcon(k, name)
    return _llama_like(k, mt, name)


def _heads(k: _Keys, d: int, n_heads: int) -> int:
    if d % n_heads:
        raise k._err("num_attention_heads", f"hidden size {d} is not divisible by "
                                            f"{n_heads} heads")
    return d // n_heads


def _llama_like(k: _Keys, mt: str, name: str) -> LlmArch:
    d = k.int("hidden_size")
    nh = k.int("num_attention_heads")
    nkv = k.int("num_key_value_heads", nh)
    if nh % nkv:
        raise k._err("num_key_value_heads", f"{nh} query heads are not a multiple of "
                                            f"{nkv} KV heads")
    mla = mla_of(k) if mt == "deepseek_v3" else None
    if mla is not None:
        hd = mla.qk_dim
    else:
        hd = k.int("head_dim") if k.d.get("head_dim") is not None else _heads(k, d, nh)
    n_layers = k.int("num_hidden_layers")
    moe = moe_of(k, mt, n_layers) if mt in MOE_TYPES else None
    gemma = mt in ("gemma", "gemma2")
    window = 0
    if mt in ("mistral", "mixtral", "phi3", "gemma2") or (mt == "qwen2"
                                              and k.bool("use_sliding_window", False)):
        window = k.opt_int("sliding_window") or 0
    rot = mla.rope_dim if mla is not None else hd
    if mt == "phi3":
        rot = int(hd * k.float("partial_rotary_factor", 1.0))
    act = k.str("hidden_activation" if gemma and "hidden_activation" in k.d else "hidden_act",
                "gelu_pytorch_tanh" if gemma else "silu")
    return LlmArch(
        model_type=mt, name=name, n_layers=n_layers, d_model=d,
        n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=k.int("intermediate_size"),
        vocab=k.int("vocab_size"), norm="rms", norm_eps=k.float("rms_norm_eps", 1e-6),
        mlp="silu_glu" if act == "silu" else "gelu_glu", positions="rope", rotary_dim=rot,
        qkv_bias=(mt == "qwen2") or k.bool("attention_bias", False),
        o_bias=k.bool("attention_bias", False), mlp_bias=k.bool("mlp_bias", False),
        tied=k.bool("tie_word_embeddings", gemma), qk_norm=mt in ("qwen3", "qwen3_moe"),
        sandwich_norm=(mt == "gemma2"),
        attn_softcap=k.float("attn_logit_softcapping", 0.0) if mt == "gemma2" else 0.0,
        final_softcap=k.float("final_logit_softcapping", 0.0) if mt == "gemma2" else 0.0,
        attn_scale=(k.float("query_pre_attn_scalar") ** -0.5 if mt == "gemma2" else 0.0),
        sliding_window=window, sliding_layers="even" if mt == "gemma2" else "all",
        moe=moe, mla=mla)


def _gpt2(k: _Keys, name: str) -> LlmArch:
    d = k.int("n_embd")
    nh = k.int("n_head")
    return LlmArch(
        model_type="gpt2", name=name, n_layers=k.int("n_layer"), d_model=d, n_heads=nh,
        n_kv_heads=nh, head_dim=_heads(k, d, nh), ffn=k.opt_int("n_inner") or 4 * d,
        vocab=k.int("vocab_size"), norm="layer", norm_eps=k.float("layer_norm_epsilon", 1e-5),
        mlp="gelu", positions="learned", max_positions=k.int("n_positions"), qkv_bias=True,
        o_bias=True, mlp_bias=True, tied=k.bool("tie_word_embeddings", True))


def _neox(k: _Keys, name: str) -> LlmArch:
    d = k.int("hidden_size")
    nh = k.int("num_attention_heads")
    hd = _heads(k, d, nh)
    return LlmArch(
        model_type="gpt_neox", name=name, n_layers=k.int("num_hidden_layers"), d_model=d,
        n_heads=nh, n_kv_heads=nh, head_dim=hd, ffn=k.int("intermediate_size"),
        vocab=k.int("vocab_size"), norm="layer", norm_eps=k.float("layer_norm_eps", 1e-5),
        mlp="gelu", positions="rope",
        rotary_dim=max(2, int(hd * k.float("rotary_pct", 0.25))) // 2 * 2,
        qkv_bias=k.bool("attention_bias", True), o_bias=k.bool("attention_bias", True),
        mlp_bias=True, tied=k.bool("tie_word_embeddings", False),
        parallel=k.bool("use_parallel_residual", True))


def _falcon(k: _Keys, name: str) -> LlmArch:
    if k.bool("alibi", False):
        raise k._err("alibi", "alibi position biases are not supported (rope only)")
    d = k.int("hidden_size")
    nh = k.int("num_attention_heads")
    new_arch = k.bool("new_decoder_architecture", False)
    if new_arch:
        nkv = k.int("num_kv_heads", nh)
    else:
        nkv = 1 if k.bool("multi_query", True) else nh
    bias = k.bool("bias", False)
    return LlmArch(
        model_type="falcon", name=name, n_layers=k.int("num_hidden_layers"), d_model=d,
        n_heads=nh, n_kv_heads=nkv, head_dim=_heads(k, d, nh),
        ffn=k.opt_int("ffn_hidden_size") or 4 * d, vocab=k.int("vocab_size"), norm="layer",
        norm_eps=k.float("layer_norm_epsilon", 1e-5), mlp="gelu", positions="rope",
        rotary_dim=_heads(k, d, nh), qkv_bias=bias, o_bias=bias, mlp_bias=bias,
        tied=k.bool("tie_word_embeddings", True),
        parallel=k.bool("parallel_attn", True) or new_arch,
        shared_norm=not new_arch and k.d.get("num_ln_in_parallel_attn") != 2)
