"""Single int8 GEMM vs its roofline: 1024³ on `small`, 4096³ on `base`.

Run:  .venv/bin/python benchmarks/gemm_roofline.py [--quick]

The model is built with onnx.helper (benchmarks/models.py: int8 activations and int8
per-channel weights through DequantizeLinear into MatMul, A8W8 via a QConfig override),
compiled by kernbench, and simulated (timing pass). The roofline bound of the layer is
max(MACs / peak MAC rate of all PEs, compulsory bytes / aggregate HBM bandwidth); the
fraction is bound / simulated layer time. Also prints each PE's pe_gemm utilization
range (GEMM tiles on all PEs run at the same time).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).parent))
from kernbench.host.flow import (  # noqa: E402
    TIMING_ONLY,
    CompileRequest,
    compile_model,
    simulate_bundle,
)
from kernbench.topology import load_topology  # noqa: E402
from models import int8_gemm  # noqa: E402

QCONFIG = 'overrides:\n  - {match: "*", activation: 8}\n'


def run(size: int, preset: str, overrides: list[str] | None = None) -> dict:
    d = Path(tempfile.mkdtemp(prefix="kb-gemm-"))
    onnx.save(int8_gemm(size, size, size), d / "gemm.onnx")
    (d / "q.yaml").write_text(QCONFIG)
    topo = load_topology(preset, overrides or [])
    t0 = time.perf_counter()
    state, _ = compile_model(d / "gemm.onnx", topo, d / "bundle",
                             CompileRequest(qconfig=d / "q.yaml"))
    t1 = time.perf_counter()
    res = simulate_bundle(d / "bundle", topo, d / "out", TIMING_ONLY)
    t2 = time.perf_counter()
    (lid, layer), = [(k, v) for k, v in res.stats["layers"].items() if v["op_type"] == "GEMM"]
    util = [e["utilization"] for k, e in res.stats["engines"].items() if k.endswith("pe_gemm")]
    return {"size": size, "preset": preset, "entries": len(state.cmdq.entries),
            "ns": layer["ns"], "bound_ns": layer["bound_ns"], "bound_by": layer["bound_by"],
            "fraction": layer["roofline_fraction"], "util_min": min(util),
            "util_max": max(util), "pes": len(util), "compile_s": t1 - t0, "sim_s": t2 - t1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1024³ on small only")
    ap.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                    help="topology override, e.g. cube.pe_template.pe_gemm.dataflow=ws")
    args = ap.parse_args()
    cases = [(1024, "small")] + ([] if args.quick else [(4096, "base")])
    print(f"{'GEMM':>10s} {'preset':6s} {'entries':>7s} {'sim ns':>12s} {'bound ns':>12s} "
          f"{'bound by':8s} {'fraction':>8s} {'pe_gemm util':>14s} {'compile s':>9s} "
          f"{'sim s':>6s}")
    for size, preset in cases:
        r = run(size, preset, args.set)
        print(f"{size:>4d}^3 int8 {preset:6s} {r['entries']:7d} {r['ns']:12,.0f} "
              f"{r['bound_ns']:12,.0f} {r['bound_by']:8s} {r['fraction']:8.3f} "
              f"{r['util_min']:.3f}-{r['util_max']:.3f} {r['compile_s']:9.2f} {r['sim_s']:6.2f}")


if __name__ == "__main__":
    main()
