"""kernbench: an NPU simulator and offline compiler.

Layers (each imports only the ones before it in this list; docs/architecture.md,
checked by tests/test_layering.py):
native → errors → numerics → config → topology → common → components → sim_engine →
report → cmdq → ir → compiler → triton_emu → models → host → cli.
"""

import os as _os

__version__ = "0.1.0"

# numpy's BLAS runs one thread unless the environment names a count (docs/adr/0960): the
# compile and the data pass multiply many small matrices, where a second BLAS thread
# busy-waits between calls and doubles the CPU they cost. It takes effect when kernbench
# is imported before numpy (the console script, `python -m`, the benchmarks).
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# the simulator core's compiled modules, or their source when the build is stale or the
# source is asked for (kernbench.native); decided before any of them is imported
from kernbench.native import choose_core as _choose_core  # noqa: E402

_choose_core()

# Kernel front end, loaded lazily so that `import kernbench` stays light.
_LAZY = {
    "jit": "kernbench.triton_emu.runtime",
    "to_device": "kernbench.triton_emu.runtime",
    "empty": "kernbench.triton_emu.runtime",
    "zeros": "kernbench.triton_emu.runtime",
    "cdiv": "kernbench.triton_emu.runtime",
    "next_power_of_2": "kernbench.triton_emu.runtime",
    "autotune": "kernbench.triton_emu.runtime",
    "heuristics": "kernbench.triton_emu.runtime",
    "Config": "kernbench.triton_emu.runtime",
    "DeviceBuffer": "kernbench.triton_emu.runtime",
}


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 lazy exports
    import importlib

    if name == "tl":
        return importlib.import_module("kernbench.tl")
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'kernbench' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
