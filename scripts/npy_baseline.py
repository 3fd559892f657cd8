"""Print the value of NPY_DISABLE_CPU_FEATURES that limits numpy to its baseline SIMD level.

numpy picks a SIMD kernel per CPU at run time among the features its build dispatches
(`numpy._core._multiarray_umath.__cpu_dispatch__`; numpy 2.4 on x86-64: X86_V3, X86_V4,
AVX512_ICL, AVX512_SPR above the X86_V2 baseline). Disabling all of them makes every CPU
run the baseline kernels, as an older CPU would: `make test` runs the float-sensitive tests
(pytest -m float_cpu) once more that way. A name the CPU lacks is accepted (disabling is a
no-op for it); a name the build does not dispatch is not, so the list comes from numpy
itself instead of being written down for one architecture.
"""

from __future__ import annotations

from numpy._core import _multiarray_umath


def disabled_features() -> list[str]:
    """Every feature numpy's build dispatches at run time (nothing on a baseline-only build)."""
    return list(getattr(_multiarray_umath, "__cpu_dispatch__", []))


if __name__ == "__main__":
    print(" ".join(disabled_features()))
