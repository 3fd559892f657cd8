"""Which experts a token goes to in a shape-only MoE model: a seeded distribution.

A shape-only model has no router weights, so the router's choice is drawn: every token
picks `k` distinct experts of `E`, each pick (without replacement) in proportion to the
expert's popularity `p`:

- ``uniform``: `p_e = 1/E`, every expert equally likely (a well-balanced router);
- ``zipf:S``: the expert of popularity rank r (1 = hottest) has `p ∝ r^-S` (skew S in
  (0, MAX_SKEW]); which expert holds which rank is a random permutation per layer, so the
  hot experts differ between layers, as trained routers' do.

Picking k distinct experts in proportion to `p` is the Gumbel top-k draw (the k largest
`log p + Gumbel noise`), which equals k successive weighted draws without replacement.
Every layer draws from its own stream `numpy.random.default_rng([seed, layer])`: the same
(spec, tokens, E, k, layer) always gives the same choice, on any machine. With
`same_layers` every layer takes layer 0's draw: the expert layers are then identical, and
so are the decoder blocks, which block replay needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernbench.errors import InputError, did_you_mean

DISTRIBUTIONS = ("uniform", "zipf")
MAX_SKEW = 4.0
DEFAULT_SKEW = 1.0


@dataclass(frozen=True)
class Routing:
    """A routing distribution: ``uniform`` or ``zipf`` with `skew`, and its seed."""

    dist: str = "uniform"
    skew: float = 0.0
    seed: int = 0
    same_layers: bool = False

    def describe(self) -> str:
        body = f"zipf:{self.skew:g}" if self.dist == "zipf" else self.dist
        same = ", the same in every layer" if self.same_layers else ""
        return f"{body}, seed {self.seed}{same}"


def parse_routing(text: str, seed: int = 0, *, field: str = "--routing",
                  same_layers: bool = False) -> Routing:
    """`uniform`, `zipf` (skew 1) or `zipf:S` → a `Routing`; anything else → InputError
    (one line naming `field`)."""
    name, _, skew_text = text.strip().partition(":")
    if name not in DISTRIBUTIONS:
        raise InputError(f"unknown routing distribution {text!r}{did_you_mean(name, DISTRIBUTIONS)}"
                         f" (known: uniform, zipf, zipf:SKEW)", field=field)
    if seed < 0:
        raise InputError(f"seed must be >= 0, got {seed}", field="--routing-seed")
    if name == "uniform":
        if skew_text:
            raise InputError(f"uniform takes no skew, got {text!r}", field=field)
        return Routing("uniform", 0.0, seed, same_layers)
    try:
        skew = float(skew_text) if skew_text else DEFAULT_SKEW
    except ValueError:
        raise InputError(f"zipf skew must be a number, got {skew_text!r}", field=field) from None
    if not (0.0 < skew <= MAX_SKEW):
        raise InputError(f"zipf skew must be in (0, {MAX_SKEW:g}], got {skew_text}",
                         field=field)
    return Routing("zipf", skew, seed, same_layers)


def popularity(r: Routing, n_experts: int, layer: int) -> np.ndarray:
    """The probability of each expert for one pick (sums to 1), for decoder layer `layer`."""
    if r.dist == "uniform":
        return np.full(n_experts, 1.0 / n_experts)
    rng = np.random.default_rng([r.seed, 0 if r.same_layers else layer, 1])
    rank = rng.permutation(n_experts) + 1            # expert e holds popularity rank[e]
    p = rank.astype(np.float64) ** -r.skew
    return p / p.sum()


def expert_choice(r: Routing, tokens: int, n_experts: int, k: int, layer: int) -> np.ndarray:
    """int64 [tokens, k]: the distinct experts each token is routed to (see module doc)."""
    if not 1 <= k <= n_experts:
        raise ValueError(f"top-k {k} outside 1..{n_experts}")
    logp = np.log(popularity(r, n_experts, layer))
    rng = np.random.default_rng([r.seed, 0 if r.same_layers else layer, 0])
    keys = logp[None, :] + rng.gumbel(size=(tokens, n_experts))
    return np.argsort(-keys, axis=1, kind="stable")[:, :k].astype(np.int64)


def expert_counts(choice: np.ndarray, n_experts: int) -> np.ndarray:
    """int64 [n_experts]: tokens routed to each expert."""
    return np.bincount(choice.reshape(-1), minlength=n_experts).astype(np.int64)


def imbalance(counts: np.ndarray) -> float:
    """max / mean of the per-expert counts (1.0 = perfectly balanced)."""
    mean = float(np.mean(counts))
    return float(np.max(counts)) / mean if mean > 0 else 0.0
