"""`import kernbench` asks numpy's BLAS for one thread unless the environment names a count
(ADR-0960); it must come before numpy's import to take effect, so each case is a fresh
interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

_PROBE = ("import os, kernbench, numpy; "
          "print(os.environ.get('OPENBLAS_NUM_THREADS'))")


def _probe(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def test_one_blas_thread_unless_the_user_names_a_count():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    assert _probe(env) == "1"
    assert _probe({**env, "OPENBLAS_NUM_THREADS": "2"}) == "2"
