"""A calibrated W8A8 compile is the same program on every CPU (ADR-0940): the built-in
`gpt2 --seq-len 8` compiled with numpy at full SIMD, at the AVX2 level and at its baseline
level writes byte-identical cmdq.json and weights.npz. (Before the calibration ran in
float64 with snapped scales, the baseline compile of this very model took other scales.)"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNBENCH = Path(sys.executable).with_name("kernbench")


def _dispatched() -> list[str]:
    from numpy._core import _multiarray_umath as m

    return list(getattr(m, "__cpu_dispatch__", []))


def _compile(out: Path, disabled: list[str]) -> dict[str, bytes]:
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(disabled)}
    res = subprocess.run([str(KERNBENCH), "compile", "gpt2", "--seq-len", "8", "-o", str(out)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    files = {"cmdq.json": (out / "cmdq.json").read_bytes()}
    with zipfile.ZipFile(out / "weights.npz") as z:
        files.update({f"weights.npz:{n}": z.read(n) for n in sorted(z.namelist())})
    return files


def test_calibrated_bundle_is_identical_at_every_simd_level(tmp_path: Path) -> None:
    levels = _dispatched()
    full = _compile(tmp_path / "full", [])
    # no AVX-512 (an AVX2 machine), then nothing above numpy's baseline
    for name, off in (("avx2", [f for f in levels if f != "X86_V3"]), ("baseline", levels)):
        got = _compile(tmp_path / name, off)
        changed = sorted(k for k in set(full) | set(got) if full.get(k) != got.get(k))
        assert not changed, f"{name}: {changed} differ from the full-SIMD compile"
