"""Replay a saved data pass alone (`kernbench replay OPLOG_DIR`).

A saved run (`run_with_data(..., save_oplog=DIR)`, bundle.save_run) is a folder: the op log (oplog.json + oplog.npz, sim_engine.op_log), the
memory before the data pass (memory_store.json + .npz, sim_engine.memory_store) and
outputs.json (each graph output's placement and dtype). Replaying needs none of the
compiler, the IR or the timing pass: a fresh DataExecutor runs the log on the saved
memory, and the outputs are read back through their placements.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kernbench.errors import InputError
from kernbench.host.bundle import OUTPUTS_JSON, read_view
from kernbench.numerics.dtypes import np_dtype
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLog


def replay(path: Path) -> tuple[dict[str, np.ndarray], MemoryStore]:
    """Run the saved log on the saved memory; returns ({output: array}, final store)."""
    path = Path(path)
    if not (path / OUTPUTS_JSON).exists():
        raise InputError(f"not a saved run: {OUTPUTS_JSON} is missing", file=str(path))
    try:
        outs = json.loads((path / OUTPUTS_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"unreadable: {e}", file=str(path / OUTPUTS_JSON)) from None
    final = DataExecutor(OpLog.load(path), MemoryStore.load(path)).run()
    got = {}
    for tid in sorted(outs):
        x = read_view(final, outs[tid]["view"])
        want = np_dtype(outs[tid]["dtype"])
        got[tid] = x.astype(want) if x.dtype != want else x
    return got, final
