"""`make test` runs the float_cpu tests a second time with numpy limited to its baseline SIMD
kernels (scripts/npy_baseline.py): the value it sets is accepted by this numpy without a
warning, and it really switches every dispatched kernel level off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = ("from numpy._core import _multiarray_umath as m; "
         "print(sorted(f for f in m.__cpu_dispatch__ if m.__cpu_features__.get(f)))")


def _baseline_value() -> str:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "npy_baseline.py")],
                         capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip()


def test_baseline_value_switches_every_dispatched_level_off():
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": _baseline_value()}
    # -W error: numpy reports a name it cannot disable as a warning at import
    res = subprocess.run([sys.executable, "-W", "error", "-c", PROBE], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout.strip() == "[]"


def test_a_name_numpy_does_not_dispatch_would_be_noticed():
    """The probe above is able to fail: a made-up name is reported at import."""
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": "NOT_A_FEATURE"}
    res = subprocess.run([sys.executable, "-W", "error", "-c", PROBE], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 or "NOT_A_FEATURE" in res.stderr


@pytest.mark.float_cpu
def test_this_process_runs_at_the_level_asked():
    """In the baseline pass of `make test` this process itself runs no dispatched level."""
    asked = os.environ.get("NPY_DISABLE_CPU_FEATURES", "").split()
    from numpy._core import _multiarray_umath as m

    assert not [f for f in asked if m.__cpu_features__.get(f)]
