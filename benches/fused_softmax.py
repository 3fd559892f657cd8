"""Row softmax, one row per program iteration (the Triton tutorial's fused softmax)."""

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
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols,
                   BLOCK: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
        z = x - tl.max(x, axis=0)
        num = tl.exp(z)
        tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=mask)


def setup(rows: int = 37, cols: int = 200, programs: int | None = None, seed: int = 0
          ) -> dict[str, Any]:  # fmt: skip
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    X, Y = kernbench.to_device(x, "x"), kernbench.empty((rows, cols))
    e = np.exp(x - x.max(1, keepdims=True))
    return {"kernel": softmax_kernel, "args": (Y, X, cols, cols, rows, cols),
            "meta": {"BLOCK": kernbench.next_power_of_2(cols)},
            "grid": (programs or min(rows, 64),), "out": Y,
            "expected": e / e.sum(1, keepdims=True), "flops": 5 * rows * cols,
            "bytes": 2 * rows * cols * 4, "bits": 32}


def run(topology: Any = "small", pes: int | None = None, **kw: Any) -> dict[str, Any]:
    fresh()
    topo = topo_of(topology)
    s = setup(**kw)
    res = s["kernel"][s["grid"]](*s["args"], topology=topo, pes=pes, **s["meta"])
    return report("fused_softmax", res, topo, s["out"].numpy(), s["expected"], s["flops"],
                  s["bytes"], s["bits"])


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(sys.argv[1] if len(sys.argv) > 1 else "small"), indent=1))
