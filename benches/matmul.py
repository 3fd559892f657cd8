"""Blocked matmul C = A @ B with an fp32 accumulator over K (fp16 operands)."""

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
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = pid // grid_n, pid % grid_n
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    c = acc.to(tl.float16)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def setup(M: int = 200, N: int = 136, K: int = 120, block_m: int = 64, block_n: int = 64,
          block_k: int = 32, seed: int = 0, replicate: bool = False) -> dict[str, Any]:  # fmt: skip
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    A = kernbench.to_device(a, "a", replicate=replicate)
    B = kernbench.to_device(b, "b", replicate=replicate)
    C = kernbench.empty((M, N), np.float16)
    ref = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    grid = (kernbench.cdiv(M, block_m) * kernbench.cdiv(N, block_n),)
    return {"kernel": matmul_kernel, "args": (A, B, C, M, N, K, K, 1, N, 1, N, 1),
            "meta": {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k},
            "grid": grid, "out": C, "expected": ref, "flops": 2 * M * N * K,
            "bytes": 2 * (M * K + K * N + M * N), "bits": 16, "tol": 1e-2}


def run(topology: Any = "small", pes: int | None = None, **kw: Any) -> dict[str, Any]:
    fresh()
    topo = topo_of(topology)
    s = setup(**kw)
    res = s["kernel"][s["grid"]](*s["args"], topology=topo, pes=pes, **s["meta"])
    return report("matmul", res, topo, s["out"].numpy().astype(np.float32),
                  s["expected"].astype(np.float32), s["flops"], s["bytes"], s["bits"],
                  tol=1e-2)


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(sys.argv[1] if len(sys.argv) > 1 else "small"), indent=1))
