"""LayerNorm forward, one row per program, columns in blocks (the Triton tutorial)."""

from __future__ import annotations

from typing import Any

import numpy as np

import kernbench
from kernbench import tl

try:
    from benches._common import fresh, report, topo_of
except ImportError:
    from _common import fresh, report, topo_of


@kernbench.jit
def layernorm_kernel(X, Y, W, B, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    _mean = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        _mean += tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.0)
        _var += x * x
    rstd = 1 / tl.sqrt(tl.sum(_var, axis=0) / N + eps)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + cols, (x - mean) * rstd * w + b, mask=mask)


def setup(rows: int = 9, cols: int = 300, block: int = 128, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    X, W, B = kernbench.to_device(x), kernbench.to_device(w), kernbench.to_device(b)
    Y = kernbench.empty((rows, cols))
    mu = x.mean(1, keepdims=True)
    ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5) * w + b
    return {"kernel": layernorm_kernel, "args": (X, Y, W, B, cols, cols, 1e-5),
            "meta": {"BLOCK": block}, "grid": (rows,), "out": Y, "expected": ref,
            "flops": 8 * rows * cols, "bytes": (2 * rows * cols + 2 * cols) * 4, "bits": 32}


def run(topology: Any = "small", pes: int | None = None, **kw: Any) -> dict[str, Any]:
    fresh()
    topo = topo_of(topology)
    s = setup(**kw)
    res = s["kernel"][s["grid"]](*s["args"], topology=topo, pes=pes, **s["meta"])
    return report("layernorm", res, topo, s["out"].numpy(), s["expected"], s["flops"],
                  s["bytes"], s["bits"], tol=1e-4)


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(sys.argv[1] if len(sys.argv) > 1 else "small"), indent=1))
