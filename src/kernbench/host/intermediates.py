"""`--dump-intermediates`: every layer output compared at the op boundary where it is
complete (the two-pass design's debug mode: "MemoryStore snapshot at each op boundary").

The final memory is the wrong place to read an intermediate tensor: a later layer may
reuse its HBM region or update it in place. So the data pass calls `BoundaryCapture` after
every op's writes land (DataExecutor's `on_commit`), and each layer output is read from the
store right after the last op that writes into its placement and ends no later than its
layer's last CMDQ entry (the timing pass's end of the layer; a layer without entries, a
view, ends with the latest layer it reads from). Ops that end later belong to later layers
(a reused region) and are not waited for. A tensor no op writes by then (a view of a graph
input) is read before the first op.

The rows (`intermediate_rows`) name the layer, its op type, the tensor, the op record
after which it was read (`op`, None: before the first op) and that op's end time, and the
comparison with the IR reference interpreter at the D11 tolerance of the tensor's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.host.bundle import Bundle, read_view
from kernbench.host.simulate import CmdqRun
from kernbench.numerics.compare import compare
from kernbench.numerics.dtypes import nbytes_of
from kernbench.sim_engine.executor import op_ranges
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpRecord

# op record ends and CMDQ entry ends are the same simulated clock, rounded to 1e-3 ns
_EPS_NS = 1e-3


def layer_ends(bundle: Bundle, run: CmdqRun) -> dict[str, float]:
    """Layer id → the end time (ns) of its last CMDQ entry in timing run `run` (with its
    entries kept); a layer without entries ends with the latest layer producing one of its
    inputs (0 when none does)."""
    ends: dict[str, float] = {}
    for src, e in zip(run.program.cmdq, run.entries, strict=True):
        if src.layer_id and e.end_ns is not None:
            ends[src.layer_id] = max(ends.get(src.layer_id, 0.0), float(e.end_ns))
    producer = {o: n.id for n in bundle.graph.nodes for o in n.outputs if o}
    for n in bundle.graph.nodes:  # topological order: producers come first
        if n.id not in ends:
            ends[n.id] = max((ends.get(producer[i], 0.0) for i in n.inputs
                              if i and i in producer), default=0.0)
    return ends


def _phys_ranges(v: dict[str, Any]) -> list[tuple[int, int]]:
    """The HBM byte ranges a memory-map view occupies (physical, parts resolved)."""
    shape, strides = tuple(v["shape"]), tuple(v["strides"])
    span = sum((d - 1) * s for d, s in zip(shape, strides, strict=True)) + 1 if shape else 1
    lo = int(v["address"])
    hi = lo + nbytes_of((span,), v["dtype"])
    if not v.get("parts"):
        return [(lo, hi)]
    out = []
    for p_lo, p_hi, phys in v["parts"]:
        a, b = max(lo, p_lo), min(hi, p_hi)
        if a < b:
            out.append((phys + a - p_lo, phys + b - p_lo))
    return out


class BoundaryCapture:
    """The DataExecutor's `on_commit` hook that reads each layer output at its boundary."""

    def __init__(self, bundle: Bundle, records: list[OpRecord], ends: dict[str, float],
                 init_store: MemoryStore) -> None:
        views = bundle.memory["views"]
        self.views = views
        self.layer_of: dict[str, Any] = {}
        tids, lo, hi, limit = [], [], [], []
        for n in bundle.graph.nodes:
            for tid in n.outputs:
                if tid and tid in views and tid not in self.layer_of:
                    self.layer_of[tid] = n
                    for a, b in _phys_ranges(views[tid]):
                        tids.append(tid)
                        lo.append(a)
                        hi.append(b)
                        limit.append(ends.get(n.id, 0.0) + _EPS_NS)
        lo_a, hi_a, lim_a = np.array(lo, np.int64), np.array(hi, np.int64), np.array(limit)
        writers: dict[str, set[int]] = {t: set() for t in self.layer_of}
        for idx, rec in enumerate(records):
            t_end = rec.t_end if rec.t_end == rec.t_end else rec.t_start
            for space, a, b in op_ranges(rec)[1]:
                if space != "hbm" or not lo_a.size:
                    continue
                hit = np.nonzero((lo_a < b) & (hi_a > a) & (lim_a >= t_end))[0]
                for k in hit:
                    writers[tids[k]].add(idx)
        self.remaining = {t: len(w) for t, w in writers.items()}
        self.waiting: dict[int, list[str]] = {}
        for t, ws in writers.items():
            for idx in ws:
                self.waiting.setdefault(idx, []).append(t)
        self.got: dict[str, tuple[np.ndarray | None, int | None, float | None, str | None]] = {}
        self.records = records
        for t, n in self.remaining.items():
            if n == 0:
                self._read(t, init_store, None)

    def _read(self, tid: str, store: MemoryStore, idx: int | None) -> None:
        t_end = None if idx is None else float(self.records[idx].t_end)
        try:
            self.got[tid] = (read_view(store, self.views[tid]), idx, t_end, None)
        except Exception as e:  # noqa: BLE001 - reported in the row: the layer wrote nothing readable
            self.got[tid] = (None, idx, t_end, f"{type(e).__name__}: {e}")

    def __call__(self, idx: int, store: MemoryStore) -> None:
        for tid in self.waiting.pop(idx, ()):
            self.remaining[tid] -= 1
            if self.remaining[tid] == 0:
                self._read(tid, store, idx)

    def rows(self, bundle: Bundle, ref_values: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """One row per layer output the interpreter computed, in topological order."""
        rows = []
        for n in bundle.graph.nodes:
            for tid in n.outputs:
                if tid not in self.got or tid not in ref_values or self.layer_of[tid] is not n:
                    continue
                got, idx, t_end, error = self.got[tid]
                row: dict[str, Any] = {"layer": n.id, "op_type": n.op_type, "tensor": tid,
                                       "op": idx, "op_end_ns": t_end}
                if got is None:
                    row.update(ok=False, max_abs_err=float("inf"), cosine=0.0, error=error)
                else:
                    ref = np.asarray(ref_values[tid])
                    c = compare(got.astype(ref.dtype) if got.dtype != ref.dtype else got, ref)
                    row.update(ok=bool(c["allclose"]), max_abs_err=float(c["max_abs_err"]),
                               cosine=float(c["cosine"]))
                rows.append(row)
        return rows


class Intermediates:
    """run_with_data's `watch_ops` for --dump-intermediates: builds the BoundaryCapture
    once the timing run is known (`capture` afterwards; None before the data pass)."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.capture: BoundaryCapture | None = None

    def __call__(self, records: list[OpRecord], run: CmdqRun, init: MemoryStore
                 ) -> BoundaryCapture:  # fmt: skip
        self.capture = BoundaryCapture(self.bundle, records, layer_ends(self.bundle, run), init)
        return self.capture
