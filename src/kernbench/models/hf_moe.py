"""The mixture-of-experts and multi-head latent attention facts of a `config.json`.

| model_type | experts (routed / shared) | router | attention |
| --- | --- | --- | --- |
| mixtral | `num_local_experts`, top `num_experts_per_tok`, `intermediate_size` each | softmax over the top-k logits | GQA |
| qwen3_moe | `num_experts`, top `num_experts_per_tok`, `moe_intermediate_size` each; dense layers in `mlp_only_layers` / off `decoder_sparse_step` | softmax, renormalised if `norm_topk_prob` | GQA, q/k RMS norm |
| deepseek_v3 | `n_routed_experts` + `n_shared_experts` (`moe_intermediate_size` each); the first `first_k_dense_replace` layers dense (`intermediate_size`) | sigmoid, renormalised if `norm_topk_prob`, × `routed_scaling_factor` | MLA (`q_lora_rank`, `kv_lora_rank`, `qk_nope_head_dim`, `qk_rope_head_dim`, `v_head_dim`) |

Which experts a token goes to is not in the config: `models.moe_routing` draws it.
DeepSeek's group-limited choice (`n_group`, `topk_group`) is not drawn: the distribution
alone decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class MoeArch:
    """The expert layers of a decoder."""

    n_experts: int            # routed experts
    top_k: int                # experts per token
    expert_ffn: int           # intermediate size of one routed expert
    n_shared: int = 0         # shared experts (every token), one MLP of n_shared × ffn
    shared_ffn: int = 0
    scoring: str = "softmax"  # "softmax" | "sigmoid"
    norm_topk: bool = True    # renormalise the k chosen weights
    scale: float = 1.0        # routed_scaling_factor
    dense_layers: tuple[int, ...] = ()   # layers with a dense MLP instead

    def is_moe(self, layer: int) -> bool:
        return layer not in self.dense_layers


@dataclass(frozen=True)
class MlaArch:
    """DeepSeek's multi-head latent attention, built in its decompressed form: the cache
    holds every head's K and V (as Hugging Face's implementation does), not the latent."""

    q_lora_rank: int          # 0: q projected directly
    kv_lora_rank: int
    nope_dim: int
    rope_dim: int
    v_dim: int

    @property
    def qk_dim(self) -> int:
        return self.nope_dim + self.rope_dim


class Keys(Protocol):
    """What `hf_config._Keys` offers (typed access naming the file and the key)."""

    d: dict

    def int(self, key: str, default: int | None = None, *, minimum: int = 1) -> int: ...

    def float(self, key: str, default: float | None = None) -> float: ...

    def bool(self, key: str, default: bool) -> bool: ...

    def str(self, key: str, default: str) -> str: ...

    def _err(self, key: str, reason: str) -> Exception: ...


def _top_k(k: Keys, n: int) -> int:
    top = k.int("num_experts_per_tok")
    if top > n:
        raise k._err("num_experts_per_tok", f"{top} experts per token > {n} experts")
    return top


def moe_of(k: Keys, mt: str, n_layers: int) -> MoeArch:
    """The MoE facts of a mixtral / qwen3_moe / deepseek_v3 config."""
    if mt == "mixtral":
        n = k.int("num_local_experts")
        return MoeArch(n, _top_k(k, n), k.int("intermediate_size"))
    if mt == "qwen3_moe":
        n = k.int("num_experts")
        step = k.int("decoder_sparse_step", 1)
        only = k.d.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
            raise k._err("mlp_only_layers", f"must be a list of layer numbers, got {only!r}")
        dense = tuple(i for i in range(n_layers) if i in only or (i + 1) % step)
        return MoeArch(n, _top_k(k, n), k.int("moe_intermediate_size"),
                       norm_topk=k.bool("norm_topk_prob", False), dense_layers=dense)
    n = k.int("n_routed_experts")
    scoring = k.str("scoring_func", "softmax")
    if scoring not in ("softmax", "sigmoid"):
        raise k._err("scoring_func", f"must be softmax or sigmoid, got {scoring!r}")
    first = k.int("first_k_dense_replace", 0, minimum=0)
    freq = k.int("moe_layer_freq", 1)
    ffn = k.int("moe_intermediate_size")
    shared = k.int("n_shared_experts", 0, minimum=0)
    return MoeArch(n, _top_k(k, n), ffn, n_shared=shared, shared_ffn=shared * ffn,
                   scoring=scoring, norm_topk=k.bool("norm_topk_prob", False),
                   scale=k.float("routed_scaling_factor", 1.0),
                   dense_layers=tuple(i for i in range(n_layers) if i < first or i % freq))


def mla_of(k: Keys) -> MlaArch:
    """The MLA facts of a deepseek_v3 config."""
    q_rank = k.d.get("q_lora_rank")
    return MlaArch(q_lora_rank=0 if q_rank is None else k.int("q_lora_rank"),
                   kv_lora_rank=k.int("kv_lora_rank"), nope_dim=k.int("qk_nope_head_dim"),
                   rope_dim=k.int("qk_rope_head_dim"), v_dim=k.int("v_head_dim"))
