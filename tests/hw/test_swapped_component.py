"""Swapping a timing model (`impl:` in the topology) changes the timing and nothing else:
the data pass computes the same outputs, byte for byte, and they still verify against
the IR interpreter (ADR-0015: a component is timing only; ADR-0020: data is executed
from the op log, not by the component)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kernbench.cli import main
from kernbench.components.builtin.pe_gemm import PeGemm
from kernbench.components.catalog import TIMING_MODELS, register

MODELS = Path(__file__).resolve().parents[1] / "models"
IMPL = "pe_gemm_thrice_test"


class _ThriceGemm(PeGemm):
    """A systolic array three times slower than pe_gemm_v1: a different timing model."""

    @classmethod
    def compute_cycles(cls, spec, m: int, n: int, k: int, bits: int) -> int:  # noqa: ANN001
        return 3 * super().compute_cycles(spec, m, n, k, bits)


def test_swapped_gemm_model_changes_time_not_outputs(tmp_path):
    register("pe_gemm", IMPL)(_ThriceGemm)
    try:
        runs = {}
        for name, sets in (("v1", []), ("swapped", ["--set",
                                                    f"cube.pe_template.pe_gemm.impl={IMPL}"])):
            out = tmp_path / name
            assert main(["run", str(MODELS / "llama.onnx"), "--inputs",
                         str(MODELS / "llama.inputs.npz"), "--verify", "--out", str(out),
                         "--no-report", "--no-trace", "--quiet", *sets]) == 0
            runs[name] = out
    finally:
        TIMING_MODELS.pop(("pe_gemm", IMPL), None)
    a, b = (json.loads((runs[n] / "stats.json").read_text()) for n in ("v1", "swapped"))
    gemm_busy = {n: sum(e["busy_ns"] for k, e in s["engines"].items() if k.endswith("pe_gemm"))
                 for n, s in (("v1", a), ("swapped", b))}
    assert gemm_busy["swapped"] == 3 * gemm_busy["v1"] > 0, "the swapped model was used"
    assert b["total_ns"] > a["total_ns"]
    oa, ob = np.load(runs["v1"] / "outputs.npz"), np.load(runs["swapped"] / "outputs.npz")
    assert sorted(oa.files) == sorted(ob.files) and oa.files
    for k in oa.files:
        assert oa[k].tobytes() == ob[k].tobytes(), k
    for r in runs.values():
        assert json.loads((r / "verification.json").read_text())["ok"]
