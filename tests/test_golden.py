"""Behaviour did not change: every golden case writes the same outputs, on any CPU.

Timing and bundle files (cmdq, memory, stats, trace, ...) are compared byte for byte through
their sha256 in tests/golden/hashes.json, on every CPU (the calibrated W8A8 bundles too:
ADR-0940). The graph outputs (outputs.npz) are floats whose
last bits follow numpy's SIMD dispatch, so they are checked as docs/verification.md says:
exactly against the IR reference interpreter run in the same process (the run's own
verification), and within record.FLOAT_BOUND (record.QUANT_BOUND where activations are
quantized) of the recorded arrays (float_outputs.npz).
An intended change of outputs re-records both files (tests/golden/record.py) in the same
commit and says why in the commit message.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location(
    "golden_record", Path(__file__).with_name("golden") / "record.py")
_record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_record)
HASHES, cases, run_case = _record.HASHES, _record.cases, _record.run_case
output_mismatches = _record.output_mismatches
FLOAT_BOUND, QUANT_BOUND = _record.FLOAT_BOUND, _record.QUANT_BOUND

GOLDEN = json.loads(HASHES.read_text(encoding="utf-8"))
GOLDEN_OUTPUTS = _record.load_floats()

# the float-sensitive tests: `make test` runs them once more with numpy's SIMD dispatch
# limited to the baseline (scripts/npy_baseline.py), as on an older CPU
pytestmark = pytest.mark.float_cpu


@pytest.mark.parametrize(("case_id", "argv"), cases(), ids=[c for c, _ in cases()])
def test_outputs_match_golden(case_id: str, argv: list[str]) -> None:
    assert case_id in GOLDEN, f"{case_id}: no golden hashes; run tests/golden/record.py"
    got = run_case(argv)
    want = GOLDEN[case_id]
    # every file byte for byte, in the baseline pass too: a calibrated compile (W8A8) is
    # the same program on every CPU (ADR-0940)
    changed = sorted(k for k in set(got.hashes) | set(want)
                     if got.hashes.get(k) != want.get(k))
    assert not changed, f"{case_id}: outputs changed: {changed}"
    # exact against the interpreter in this process: the data pass's outputs are the
    # interpreter's to the last bit, whatever SIMD kernels numpy picked here
    for c in got.interpreter_checks:
        assert c["max_abs_err"] == 0.0, f"{case_id}: {c['output']} differs from the interpreter"
    bad = output_mismatches(got.outputs, GOLDEN_OUTPUTS.get(case_id, {}),
                            got.quantized_activations)
    assert not bad, f"{case_id}: graph outputs moved: {bad}"


def test_every_golden_case_is_still_run() -> None:
    assert sorted(GOLDEN) == sorted(c for c, _ in cases())
    model_cases = {c for c, _ in cases() if not c.startswith("kernel:")}
    assert sorted(GOLDEN_OUTPUTS) == sorted(model_cases)


def test_the_float_check_fails_on_a_real_change() -> None:
    """The bound still catches a change: one logit moved by 10 bounds, a sign flipped, a
    NaN, a lost output, a changed shape or dtype, an integer off by one."""
    want = {"logits": next(a for o in GOLDEN_OUTPUTS.values() for a in o.values()
                           if a.dtype == np.float32 and a.size > 100)}
    w = want["logits"]
    scale = float(np.abs(w).max())
    assert output_mismatches({"logits": w.copy()}, want) == []
    inside = w.copy()
    inside.flat[7] += 0.5 * FLOAT_BOUND * scale  # within the bound: one CPU's last bits
    assert output_mismatches({"logits": inside}, want) == []
    moved = w.copy()
    moved.flat[7] += 10 * FLOAT_BOUND * scale
    assert output_mismatches({"logits": moved}, want)
    flipped = w.copy()
    flipped.flat[-1] = -flipped.flat[-1] if flipped.flat[-1] else 1.0
    assert output_mismatches({"logits": flipped}, want)
    nan = w.copy()
    nan.flat[0] = np.nan
    assert output_mismatches({"logits": nan}, want)
    assert output_mismatches({}, want)
    assert output_mismatches({"logits": w[..., :-1]}, want)
    assert output_mismatches({"logits": w.astype(np.float64)}, want)
    ints = {"ids": np.arange(6, dtype=np.int64)}
    off = ints["ids"].copy()
    off[3] += 1
    assert output_mismatches({"ids": off}, ints)
    assert output_mismatches({"ids": ints["ids"].copy()}, ints) == []


def test_the_quantized_bound_fails_on_a_real_change() -> None:
    """With quantized activations the bound is in L2: a rounding flip's spread passes, a
    change of a few percent of the whole output does not."""
    w = next(a for o in GOLDEN_OUTPUTS.values() for a in o.values()
             if a.dtype == np.float32 and a.size > 100)
    want = {"logits": w}
    norm = float(np.linalg.norm(w.astype(np.float64)))
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(w.shape)
    noise *= norm / float(np.linalg.norm(noise))
    small = (w + 0.5 * QUANT_BOUND * noise).astype(np.float32)
    assert output_mismatches({"logits": small}, want, quantized=True) == []
    big = (w + 2 * QUANT_BOUND * noise).astype(np.float32)
    assert output_mismatches({"logits": big}, want, quantized=True)
    assert output_mismatches({"logits": big}, want)  # and the float bound is tighter
    assert output_mismatches({"logits": -w}, want, quantized=True)
