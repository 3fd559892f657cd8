"""Generate SCALE-Sim 3.0.0 reference numbers for systolic-array GEMMs.

Writes ``tests/data/scalesim_gemm.json``, which ``tests/test_systolic_scalesim.py`` checks
``kernbench.components.builtin.systolic`` against. The JSON is committed; rerun this script only
to change the case list.

SCALE-Sim is NOT a kernbench dependency and must not go into the project venv. Use a separate
venv (numpy 2.4 breaks scalesim 3.0.0 with "only 0-dimensional arrays can be converted to Python
scalars")::

    python3 -m venv /work/scalesim-venv
    /work/scalesim-venv/bin/pip install scalesim==3.0.0 'numpy<2.4'
    /work/scalesim-venv/bin/python scripts/scalesim_reference.py [--out PATH]

Each case ``(m, n, k, rows, cols, dataflow)`` is the GEMM ``C[m,n] = A[m,k] @ B[k,n]`` given to
SCALE-Sim as the topology row ``G1, m, n, k,`` on a ``rows`` (ArrayHeight) x ``cols``
(ArrayWidth) array. SRAMs are large and the interface bandwidth is ``CALC`` so that the memory
system never stalls; the recorded fields are SCALE-Sim's ``get_compute_report_items()``:
``total_cycles`` (incl. prefetch), ``compute_cycles``, ``stall_cycles``, and the percentages
``mapping_efficiency`` and ``compute_util``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from pathlib import Path

SCALESIM_VERSION = "3.0.0"

# (m, n, k, rows, cols, dataflow). Small on purpose: SCALE-Sim simulates every cycle in Python.
CASES: list[tuple[int, int, int, int, int, str]] = [
    # exact single fold on square arrays
    (4, 4, 4, 4, 4, "ws"),
    (8, 8, 8, 8, 8, "os"),
    (8, 8, 8, 8, 8, "is"),
    # multiples of the array, several folds
    (32, 32, 32, 8, 8, "ws"),
    (32, 32, 32, 8, 8, "os"),
    (32, 32, 32, 8, 8, "is"),
    (64, 64, 64, 32, 32, "ws"),
    (64, 64, 64, 32, 32, "os"),
    (64, 64, 64, 32, 32, "is"),
    # non-multiples of the array
    (13, 17, 19, 8, 8, "ws"),
    (13, 17, 19, 8, 8, "os"),
    (13, 17, 19, 8, 8, "is"),
    (100, 33, 65, 32, 32, "ws"),
    (100, 33, 65, 32, 32, "os"),
    (100, 33, 65, 32, 32, "is"),
    # non-square arrays (tall 16x8 and wide 8x16)
    (40, 24, 50, 16, 8, "ws"),
    (40, 24, 50, 16, 8, "os"),
    (40, 24, 50, 16, 8, "is"),
    (40, 24, 50, 8, 16, "ws"),
    (40, 24, 50, 8, 16, "os"),
    (40, 24, 50, 8, 16, "is"),
    (7, 33, 12, 4, 16, "ws"),
    (33, 7, 12, 16, 4, "is"),
    # K smaller than the array
    (64, 48, 3, 16, 16, "ws"),
    (64, 48, 3, 16, 16, "os"),
    (64, 48, 3, 16, 16, "is"),
    (20, 20, 1, 8, 8, "os"),
    # K larger than the array
    (16, 16, 128, 8, 8, "ws"),
    (16, 16, 128, 8, 8, "os"),
    (16, 16, 128, 8, 8, "is"),
    # degenerate vectors
    (1, 64, 64, 8, 8, "ws"),
    (64, 1, 64, 8, 8, "is"),
    (1, 1, 100, 4, 4, "os"),
    # one larger GEMM
    (128, 128, 128, 32, 32, "ws"),
]

CONFIG_TEMPLATE = """\
[general]
run_name = kernbench_ref

[architecture_presets]
ArrayHeight = {rows}
ArrayWidth = {cols}
IfmapSramSzkB = 1024
FilterSramSzkB = 1024
OfmapSramSzkB = 1024
IfmapOffset = 0
FilterOffset = 10000000
OfmapOffset = 20000000
Bandwidth = 10
Dataflow = {dataflow}
MemoryBanks = 1
ReadRequestBuffer = 32
WriteRequestBuffer = 32

[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = 10
IfmapSRAMBankNum = 10
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = 10
FilterSRAMBankNum = 10
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = false
SparseRep = ellpack_block
OptimizedMapping = false
BlockSize = 8
RandomNumberGeneratorSeed = 40

[run_presets]
InterfaceBandwidth = CALC
UseRamulatorTrace = False
"""


def run_case(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> dict:
    """Run SCALE-Sim on one GEMM and return its compute-report numbers as a JSON-ready dict."""
    from scalesim.scale_sim import scalesim  # only in the separate SCALE-Sim venv

    with tempfile.TemporaryDirectory(prefix="scalesim_ref_") as tmp:
        d = Path(tmp)
        cfg = d / "arch.cfg"
        topo = d / "gemm.csv"
        layout = d / "layout.csv"
        cfg.write_text(CONFIG_TEMPLATE.format(rows=rows, cols=cols, dataflow=dataflow))
        # The parser drops the last comma-separated field, hence the trailing commas.
        topo.write_text(f"Layer, M, N, K,\nG1, {m}, {n}, {k},\n")
        layout.write_text("Layer name, IFMAP Height Intraline Factor,\n")
        with contextlib.redirect_stdout(io.StringIO()):
            sim = scalesim(
                save_disk_space=True,
                verbose=False,
                config=str(cfg),
                topology=str(topo),
                layout=str(layout),
                input_type_gemm=True,
            )
            sim.run_scale(top_path=str(d))
        items = sim.runner.single_layer_sim_object_list[0].get_compute_report_items()
    total, compute, stall, _overall_util, mapping_eff, compute_util = items
    return {
        "m": m,
        "n": n,
        "k": k,
        "rows": rows,
        "cols": cols,
        "dataflow": dataflow,
        "total_cycles": int(total),
        "compute_cycles": int(compute),
        "stall_cycles": int(stall),
        "mapping_efficiency": float(mapping_eff),
        "compute_util": float(compute_util),
    }


def main() -> None:
    """Run every case in CASES and write the reference JSON."""
    default_out = Path(__file__).resolve().parents[1] / "tests" / "data" / "scalesim_gemm.json"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args()

    import scalesim

    version = getattr(scalesim, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("scalesim")
    if version != SCALESIM_VERSION:
        raise SystemExit(f"need scalesim=={SCALESIM_VERSION}, found {version}")

    cases = []
    for case in CASES:
        result = run_case(*case)
        if result["stall_cycles"] != 0:
            raise SystemExit(f"unexpected memory stalls for {case}: {result}")
        print(f"{case}: compute_cycles={result['compute_cycles']}", flush=True)
        cases.append(result)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"scalesim_version": SCALESIM_VERSION, "cases": cases}
    args.out.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
