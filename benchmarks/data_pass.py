"""Data-pass (ADR-0020 pass 2) cost: op-log size and DataExecutor time for the tl kernels,
and the effect of GEMM batching.

    .venv/bin/python benchmarks/data_pass.py [--preset base]

Kernel rows: pass-1 wall time (SimPy + greenlets + pass-1 memory data), pass-2 wall time
(DataExecutor on the op log), records logged, GEMMs batched. The batching row runs a
synthetic log of 64 independent alike GEMMs at one t_start, batched vs one by one.
(The CMDQ rows are added by the CMDQ data path.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernbench.data import DataExecutor, MemoryStore, OpRecord  # noqa: E402
from kernbench.topology import load_topology  # noqa: E402


def kernel_rows(preset: str) -> list[dict]:
    from benches import flash_attention, fused_softmax, layernorm, matmul, vector_add
    from benches._common import fresh
    topo = load_topology(preset)
    cases = [
        ("vector_add", vector_add, {"n": 1 << 18, "block": 4096}),
        ("fused_softmax", fused_softmax, {"rows": 256, "cols": 1000}),
        ("matmul", matmul, {"M": 512, "N": 512, "K": 512}),
        ("layernorm", layernorm, {"rows": 64, "cols": 2000, "block": 512}),
        ("flash_attention", flash_attention, {"heads": 4, "seq_q": 256, "seq_k": 256,
                                              "d": 64, "block_m": 64, "block_n": 64}),
    ]
    rows = []
    for name, mod, kw in cases:
        fresh()
        s = mod.setup(**kw)
        res = s["kernel"][s["grid"]](*s["args"], topology=topo, **s["meta"])
        ok = np.allclose(np.asarray(s["out"].numpy(), np.float32),
                         np.asarray(s["expected"], np.float32), rtol=1e-2, atol=1e-2)
        rows.append({"kernel": name, "records": len(res.op_log), "pass1_s": res.pass1_s,
                     "pass2_s": res.pass2_s, "batched_gemms": res.extra["gemms_batched"],
                     "sim_ns": res.total_ns, "ok": ok})
    return rows


def batching_row(n: int = 64, m: int = 64) -> dict:
    rng = np.random.default_rng(0)
    space = "tcm:pe0"
    out = {}
    for batch in (False, True):
        st = MemoryStore({space: 1 << 24})
        log = []
        for i in range(n):
            base = i * 3 * m * m * 4
            st.write(space, base, rng.standard_normal((m, m)).astype(np.float32))
            st.write(space, base + m * m * 4, rng.standard_normal((m, m)).astype(np.float32))
            log.append(OpRecord(0.0, 10.0, f"pe{i}.pe_gemm", "gemm", "gemm", {
                "space": space, "src_a_addr": base, "src_b_addr": base + m * m * 4,
                "dst_addr": base + 2 * m * m * 4, "shape_a": (m, m), "shape_b": (m, m),
                "shape_out": (m, m), "dtype_in": "float32", "dtype_acc": "float32",
                "dtype_out": "float32"}, []))
        t0 = time.perf_counter()
        DataExecutor(log, st, batch=batch).run()
        out["batched_s" if batch else "unbatched_s"] = time.perf_counter() - t0
    return {"gemms": n, "shape": m, **out}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="base")
    a = ap.parse_args()
    print(f"{'kernel':<16} {'records':>8} {'sim ns':>10} {'pass1 s':>8} {'pass2 s':>8} "
          f"{'batched':>8} {'ok':>4}")
    for r in kernel_rows(a.preset):
        print(f"{r['kernel']:<16} {r['records']:>8} {r['sim_ns']:>10.0f} {r['pass1_s']:>8.2f} "
              f"{r['pass2_s']:>8.2f} {r['batched_gemms']:>8} {r['ok']!s:>4}")
    b = batching_row()
    print(f"\n{b['gemms']} independent {b['shape']}^3 fp32 GEMMs at one t_start: "
          f"batched {b['batched_s'] * 1e3:.1f} ms, one by one {b['unbatched_s'] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
