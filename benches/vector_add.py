"""Vector add: out = x + y (the Triton tutorial kernel)."""

from __future__ import annotations

from typing import Any

import numpy as np

import kernbench
from kernbench import tl

try:
    from benches._common import fresh, report, topo_of
except ImportError:  # run as a script from benches/
    from _common import fresh, report, topo_of


@kernbench.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def setup(n: int = 10_000, block: int = 1024, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    X, Y, O = kernbench.to_device(x, "x"), kernbench.to_device(y, "y"), kernbench.empty(n)  # noqa: E741
    return {"kernel": add_kernel, "args": (X, Y, O, n), "meta": {"BLOCK": block},
            "grid": (kernbench.cdiv(n, block),), "out": O, "expected": x + y,
            "flops": n, "bytes": 3 * n * 4, "bits": 32}


def run(topology: Any = "small", pes: int | None = None, **kw: Any) -> dict[str, Any]:
    fresh()
    topo = topo_of(topology)
    s = setup(**kw)
    res = s["kernel"][s["grid"]](*s["args"], topology=topo, pes=pes, **s["meta"])
    return report("vector_add", res, topo, s["out"].numpy(), s["expected"], s["flops"],
                  s["bytes"], s["bits"])


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(sys.argv[1] if len(sys.argv) > 1 else "small"), indent=1))
