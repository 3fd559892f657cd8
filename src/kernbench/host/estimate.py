"""Estimate the memory a run needs before starting it, and refuse what cannot fit.

A run holds, at its peak, every tensor of the IR more than once: the compiled weights,
the MemoryStore's initial snapshot and final state (pass 2), and the reference
interpreter's values (--verify); attention also materialises its score matrix
(heads × seq × kv) per layer. The estimate is

    FACTOR × Σ tensor bytes of the IR  +  2 × Σ attention score bytes

and a run is refused (InputError, exit 2, with the estimate and the limit) when it is
above the limit: the memory available on this machine (MemAvailable), or
KERNBENCH_MEMORY_LIMIT_GIB when set. Named models (gpt2, llama, gpt2-small) are checked
from their configuration before they are built: building a 100 000-token causal mask is
itself the first MemoryError.
"""

from __future__ import annotations

import math
import os

from kernbench.errors import InputError
from kernbench.ir.model import Graph
from kernbench.models.builders import ModelConfig

FACTOR = 4
ENV = "KERNBENCH_MEMORY_LIMIT_GIB"
_ITEMSIZE = {"fp64": 8, "int64": 8, "fp32": 4, "int32": 4, "uint32": 4, "fp16": 2, "bf16": 2,
             "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool": 1, "int4": 0.5,
             "uint4": 0.5}


def memory_limit() -> int:
    """Bytes a run may use: KERNBENCH_MEMORY_LIMIT_GIB, else MemAvailable (Linux), else
    the physical memory."""
    env = os.environ.get(ENV)
    if env:
        try:
            v = float(env)
            if not math.isfinite(v) or v <= 0:
                raise ValueError
            return int(v * 2**30)
        except ValueError:
            raise InputError(f"must be a positive number of GiB, got {env!r}",
                             field=ENV) from None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def refuse_above_limit(estimate: int, what: str) -> None:
    """InputError naming the estimate and the limit when `estimate` does not fit."""
    limit = memory_limit()
    if estimate > limit:
        raise InputError(f"needs about {estimate / 2**30:.1f} GiB of memory, more than the "
                         f"{limit / 2**30:.1f} GiB limit (available memory, or {ENV}); "
                         "use a shorter --seq-len / --kv-len or a smaller model", where=what)


def named_model_bytes(cfg: ModelConfig, seq: int, kv_len: int) -> int:
    """Estimate for a kernbench.models.builders config built for seq new tokens after
    kv_len cached ones (fp32)."""
    t = seq + kv_len
    d, heads, layers = cfg.d, cfg.heads, cfg.n_layer
    ffn = cfg.ffn or 4 * d
    weights = layers * (4 * d * d + 2 * d * ffn) + 2 * cfg.vocab * d
    acts = layers * seq * (12 * d + 2 * ffn) + seq * cfg.vocab
    kv = layers * 2 * t * d
    scores = layers * heads * seq * t
    mask = seq * t
    return 4 * (FACTOR * (weights + acts + kv + mask) + 2 * scores)


def graph_bytes(graph: Graph) -> int:
    """Estimate for an imported IR graph (see the module docstring)."""
    total = 0
    for t in graph.tensors.values():
        total += math.ceil(math.prod(t.shape) * _ITEMSIZE.get(t.dtype, 4))
    scores = 0
    for n in graph.nodes:
        if n.op_type != "ATTENTION" or len(n.inputs) < 2:
            continue
        q, k = graph.tensors.get(n.inputs[0]), graph.tensors.get(n.inputs[1])
        if q is None or k is None or len(q.shape) < 2 or len(k.shape) < 2:
            continue
        s, t = q.shape[-2], k.shape[-2]
        scores += math.prod(q.shape[:-1]) * t * 4 if s else 0
    return FACTOR * total + 2 * scores
