"""The tl kernels of benches/ at their default shapes (not multiples of the blocks), on
`small` and `base`: time, roofline bound and fraction, error against numpy.

Run:  .venv/bin/python benchmarks/benches_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benches import flash_attention, fused_softmax, layernorm, matmul, vector_add  # noqa: E402

from kernbench.topology import load_topology  # noqa: E402


def main() -> None:
    print("| preset | kernel | grid | PEs | ok | max abs err | time ns | bound ns | fraction "
          "| bottleneck |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for preset in ("small", "base"):
        topo = load_topology(preset)
        for mod in (vector_add, fused_softmax, matmul, layernorm, flash_attention):
            r = mod.run(topo)
            b = r["bottleneck"]
            print(f"| {preset} | {r['kernel']} | {r['grid']} | {r['pes']} | {r['ok']} | "
                  f"{r['max_abs_err']:.2g} | {r['total_ns']:.0f} | {r['bound_ns']:.0f} | "
                  f"{r['roofline_fraction']:.3f} | {b['component']} "
                  f"({b['utilization']:.2f}) |")


if __name__ == "__main__":
    main()
