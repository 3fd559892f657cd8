"""Replay a saved data pass alone (`kernbench replay OPLOG_DIR`).

A saved run (`run_with_data(..., save_oplog=DIR)`, bundle.save_run) is a folder: the op log (oplog.json + oplog.npz, sim_engine.op_log), the
memory before the data pass (memory_store.json + .npz, sim_engine.memory_store) and
outputs.json (each graph output's placement and dtype) and outputs.npz (the values the
run produced; `replay_verdict` compares a replay with them bit for bit). Replaying needs none of the
compiler, the IR or the timing pass: a fresh DataExecutor runs the log on the saved
memory, and the outputs are read back through their placements.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kernbench.errors import InputError
from kernbench.host.bundle import OUTPUTS_JSON, SAVED_OUTPUTS, read_view
from kernbench.ir.model import load_weights
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


def first_difference(got: np.ndarray, want: np.ndarray) -> str | None:
    """None when `got` and `want` are bit-identical (dtype, shape and every byte; a NaN
    equals the same NaN), else where they first differ: the index and both values."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return (f"replayed {got.dtype}{list(got.shape)}, saved {want.dtype}{list(want.shape)}")
    a, b = np.ascontiguousarray(got).reshape(-1), np.ascontiguousarray(want).reshape(-1)
    if a.tobytes() == b.tobytes():
        return None
    bits = np.dtype(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else None
    if bits is not None:
        flat = int(np.flatnonzero(a.view(bits) != b.view(bits))[0])
    else:  # an odd item size: compare item by item
        flat = next(i for i in range(a.size) if a[i:i + 1].tobytes() != b[i:i + 1].tobytes())
    idx = tuple(int(i) for i in np.unravel_index(flat, got.shape)) if got.shape else ()
    return f"index {list(idx)}: replayed {a[flat]}, saved {b[flat]}"


def replay_verdict(path: Path, replayed_npz: Path) -> tuple[bool | None, str]:
    """Compare the replay's outputs.npz with the saved run's (both written by the same npz
    writer, so the comparison is of what a user gets): (True, line) when every array is
    bit-identical, (False, line naming the first differing output, index and values), or
    (None, line) when the folder holds no saved outputs (saved by an older kernbench)."""
    saved_path = Path(path) / SAVED_OUTPUTS
    if not saved_path.exists():
        return None, f"no saved outputs to compare with ({saved_path} is missing)"
    saved = load_weights(saved_path)
    got = load_weights(replayed_npz)
    for name in sorted(set(got) | set(saved)):
        if name not in saved or name not in got:
            side = "saved run" if name not in saved else "replay"
            return False, f"differs: output '{name}' is missing from the {side}"
        diff = first_difference(got[name], saved[name])
        if diff is not None:
            return False, f"differs from the saved outputs: output '{name}', {diff}"
    n = len(got)
    return True, f"bit-identical to the saved outputs ({n} array{'' if n == 1 else 's'})"
