"""Data-pass (ADR-0020 pass 2) cost: op-log size and DataExecutor time for the tl kernels,
and the effect of GEMM batching.

    .venv/bin/python benchmarks/data_pass.py [--preset base]

Kernel rows: pass-1 wall time (SimPy + greenlets + pass-1 memory data), pass-2 wall time
(DataExecutor on the op log), records logged, GEMMs batched. The batching row runs a
synthetic log of 64 independent alike GEMMs at one t_start, batched vs one by one.
CMDQ rows: a compiled test model (bundle) simulated three ways in one process: the
timing pass alone, the timing pass with the op logger on (pass 1 of the data path), and
the DataExecutor (pass 2) on that log.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernbench.sim_engine.executor import DataExecutor  # noqa: E402
from kernbench.sim_engine.memory_store import MemoryStore  # noqa: E402
from kernbench.sim_engine.op_log import OpRecord  # noqa: E402
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


def cmdq_rows(preset: str) -> list[dict]:
    import tempfile

    from kernbench.cmdq.io import load_program
    from kernbench.compiler.inputs import default_inputs
    from kernbench.host.bundle import Bundle, DataContext, deploy
    from kernbench.host.flow import compile_model
    from kernbench.host.simulate import simulate_program
    from kernbench.sim_engine.op_log import OpLogger

    topo = load_topology(preset)
    rows = []
    models = Path(__file__).resolve().parents[1] / "tests" / "models"
    for name in ("gpt2", "llama", "bert"):
        d = Path(tempfile.mkdtemp(prefix="kb-dp-"))
        compile_model(models / f"{name}.onnx", topo, d / "b")
        prog = load_program(d / "b" / "cmdq.json")
        bundle = Bundle.load(d / "b")
        t0 = time.perf_counter()
        simulate_program(prog, topo, trace=False)
        t1 = time.perf_counter()
        store = MemoryStore.for_topology(topo)
        deploy(store, bundle, default_inputs(bundle.graph, 0))
        init = store.snapshot()
        log = OpLogger()
        t2 = time.perf_counter()
        simulate_program(prog, topo, trace=False, op_logger=log, data=DataContext(bundle))
        t3 = time.perf_counter()
        DataExecutor(log, init).run()
        t4 = time.perf_counter()
        rows.append({"model": name, "entries": len(prog.cmdq), "records": len(log),
                     "timing_s": t1 - t0, "timing_logged_s": t3 - t2, "pass2_s": t4 - t3})
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
    print(f"\n{'CMDQ bundle':<16} {'entries':>8} {'records':>8} {'timing s':>9} "
          f"{'+logger s':>9} {'pass2 s':>8} {'pass2/timing':>12}")
    for r in cmdq_rows(a.preset):
        print(f"{r['model']:<16} {r['entries']:>8} {r['records']:>8} {r['timing_s']:>9.3f} "
              f"{r['timing_logged_s']:>9.3f} {r['pass2_s']:>8.3f} "
              f"{r['pass2_s'] / r['timing_s']:>12.2f}")
    b = batching_row()
    print(f"\n{b['gemms']} independent {b['shape']}^3 fp32 GEMMs at one t_start: "
          f"batched {b['batched_s'] * 1e3:.1f} ms, one by one {b['unbatched_s'] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
