"""Compile time and simulation time (timing pass only, no trace) of transformer models,
and whether a Llama decode step with a long KV cache is memory- or compute-bound.

    .venv/bin/python benchmarks/compile_simulate.py            # all cases
    .venv/bin/python benchmarks/compile_simulate.py --quick    # skip GPT-2-small

Cases: (a) tests/models/gpt2.onnx (seq 16) on `small` and `base`; (b) a GPT-2-small-sized
prefill (12 layers, d=768, 12 heads, vocab 2048, seq 128) on `base`; (c) the tiny Llama's
decode step with a 512-token KV cache on `small`: its per-layer `bound_by` counts and the
whole-model verdict (Σ compute-bound ns vs Σ memory-bound ns over stats["layers"]).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from kernbench.host.flow import TIMING_ONLY, compile_model, simulate_bundle
from kernbench.models.builders import build_gpt2, model_for
from kernbench.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]


def measure(model: Path, topology: str, work: Path) -> dict:
    topo = load_topology(topology)
    bundle = work / "bundle"
    t0 = time.perf_counter()
    state, _ = compile_model(model, topo, bundle)
    t1 = time.perf_counter()
    res = simulate_bundle(bundle, topo, work / "out", TIMING_ONLY)
    t2 = time.perf_counter()
    return {"compile_s": t1 - t0, "simulate_s": t2 - t1, "entries": len(state.cmdq.entries),
            "sim_ns": res.stats["total_ns"], "stats": res.stats}


def verdict(stats: dict) -> dict:
    layers = stats["layers"].values() if isinstance(stats["layers"], dict) else stats["layers"]
    layers = list(layers)
    counts = Counter(lay["bound_by"] for lay in layers)
    roof_c = sum(lay["compute_bound_ns"] for lay in layers)
    roof_m = sum(lay["memory_bound_ns"] for lay in layers)
    sim = Counter()
    for lay in layers:
        sim[lay["bound_by"]] += lay["ns"]
    return {"counts": dict(counts), "compute_bound_ns": roof_c, "memory_bound_ns": roof_m,
            "sim_ns_by_bound": dict(sim),
            "verdict": "memory-bound" if roof_m > roof_c else "compute-bound"}


def main() -> None:
    import onnx  # after kernbench: its one BLAS thread holds only if set before numpy loads

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the GPT-2-small case")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        gpt2 = ROOT / "tests" / "models" / "gpt2.onnx"
        measure(gpt2, "small", tmp / "warmup")  # imports and caches, not counted
        for topo in ("small", "base"):
            rows.append(("gpt2 tiny prefill seq 16", topo,
                         measure(gpt2, topo, tmp / f"gpt2-{topo}")))
        if not args.quick:
            p = tmp / "gpt2_small.onnx"
            onnx.save(build_gpt2(n_layer=12, d=768, heads=12, seq=128, vocab=2048), str(p))
            rows.append(("gpt2-small prefill seq 128", "base", measure(p, "base", tmp / "g2s")))
        p = tmp / "llama_decode.onnx"
        onnx.save(model_for("llama", seq_len=1, kv_len=512), str(p))
        llama = measure(p, "small", tmp / "llama")
        rows.append(("llama tiny decode kv 512", "small", llama))
    print(f"{'model':28s} {'topology':8s} {'entries':>8s} {'compile s':>10s} "
          f"{'simulate s':>11s} {'simulated us':>13s}")
    for name, topo, r in rows:
        print(f"{name:28s} {topo:8s} {r['entries']:8d} {r['compile_s']:10.2f} "
              f"{r['simulate_s']:11.2f} {r['sim_ns'] / 1000:13.1f}")
    v = verdict(llama["stats"])
    print("\nllama decode, kv 512, small: layers bound_by", v["counts"])
    print(f"  roofline Σ compute-bound {v['compute_bound_ns']:.0f} ns vs Σ memory-bound "
          f"{v['memory_bound_ns']:.0f} ns -> {v['verdict']}")
    print("  simulated ns by bound_by: "
          + ", ".join(f"{k} {ns:.0f}" for k, ns in sorted(v["sim_ns_by_bound"].items())))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
