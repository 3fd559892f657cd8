"""The op log: what the data pass must execute, recorded by the
component base-class hooks only. It is plain data: it can be saved to a folder and
replayed by the DataExecutor alone (no compiler, no IR).

Contract with the front ends: a stage's params dict carries the data description under
the key ``"data"``: a dict with ``"op_kind"`` ("memory" | "gemm" | "math"), ``"op_name"``
and the D5 params (see docs/data-pass.md). Stages without ``"data"`` are timing-only and
are not logged. Two optional keys link records explicitly (D5 dependency_ids):
``"op_id"`` (any hashable the front end chooses) names the record, ``"after"`` lists
op_ids it depends on; they become `dependency_ids` (record indices).

Params hold plain values only: None, bool, int, float, str, lists / tuples and dicts
(str keys) of those, numpy arrays and numpy scalars; anything else is refused when it is
recorded (`check_plain`).

Records come out ordered by t_start, ties in insertion order (the hooks fire in SimPy
time order, so insertion order already is that order). With no logger injected the
hooks are never called: zero cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernbench.errors import InputError, SimulationError
from kernbench.numerics.dtypes import np_dtype
from kernbench.numerics.npz import write_npz

_META = ("op_kind", "op_name", "op_id", "after")
LOG_JSON, LOG_NPZ = "oplog.json", "oplog.npz"
FORMAT = "kernbench-oplog/1"


@dataclass(slots=True)
class OpRecord:
    t_start: float
    t_end: float
    component_id: str
    op_kind: str  # "memory" | "gemm" | "math"
    op_name: str
    params: dict[str, Any]
    dependency_ids: list[int] = field(default_factory=list)


def check_plain(value: object, where: str) -> None:
    """Raise SimulationError unless `value` is plain data (see the module docstring)."""
    if isinstance(value, np.ndarray | np.generic) and (value.dtype.kind == "O" or
                                                       value.dtype.names is not None):
        raise SimulationError(f"{where}: op-log arrays hold numbers, not {value.dtype}")
    if value is None or isinstance(value, bool | int | float | str | np.ndarray | np.generic):
        return
    if isinstance(value, list | tuple):
        for v in value:
            check_plain(v, where)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise SimulationError(f"{where}: op-log params need str keys, got {k!r}")
            check_plain(v, f"{where}.{k}")
        return
    raise SimulationError(f"{where}: op-log params hold plain data only, not "
                          f"{type(value).__name__}")


class OpLogger:
    """Injected into Simulator(op_logger=...); the components' op-log hooks call record_start/record_end."""

    def __init__(self) -> None:
        self.records: list[OpRecord] = []
        self._open: dict[int, OpRecord] = {}
        self._by_op_id: dict[Any, int] = {}

    def _data(self, msg: object) -> dict[str, Any] | None:
        p = getattr(msg, "params", None)
        if not p:
            return None
        return p.get("data")

    def record_start(self, t: float, component_id: str, msg: object) -> None:
        d = self._data(msg)
        if d is None:
            return
        params = {k: v for k, v in d.items() if k not in _META}
        check_plain(params, f"{component_id} {d['op_name']}")
        deps = [self._by_op_id[a] for a in d.get("after", ()) if a in self._by_op_id]
        rec = OpRecord(float(t), float("nan"), component_id, d["op_kind"], d["op_name"],
                       params, deps)
        idx = len(self.records)
        self.records.append(rec)
        if "op_id" in d:
            self._by_op_id[d["op_id"]] = idx
        self._open[id(msg)] = rec

    def record_end(self, t: float, component_id: str, msg: object) -> None:
        if self._data(msg) is None:
            return
        rec = self._open.pop(id(msg), None)
        if rec is not None:
            rec.t_end = float(t)

    @property
    def open_records(self) -> int:
        """Records started but not ended (a simulation cut short leaves some)."""
        return len(self._open)

    def ordered(self) -> list[OpRecord]:
        """Records by t_start, ties in insertion order (a stable sort)."""
        return sorted(self.records, key=lambda r: r.t_start)

    def log(self) -> OpLog:
        return OpLog(list(self.records))

    def __len__(self) -> int:
        return len(self.records)


@dataclass
class OpLog:
    """A recorded op log; `save` / `load` a folder (oplog.json + oplog.npz, no pickle)."""

    records: list[OpRecord]

    def save(self, path: str | Path) -> None:
        """Write the log to folder `path`: JSON for the records, arrays in a
        deterministic .npz (shared arrays written once). Same log → same bytes."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        enc = _Encoder()
        recs = [{"t_start": r.t_start, "t_end": r.t_end, "component_id": r.component_id,
                 "op_kind": r.op_kind, "op_name": r.op_name, "params": enc.encode(r.params),
                 "dependency_ids": list(r.dependency_ids)} for r in self.records]
        doc = {"format": FORMAT, "records": recs}
        (path / LOG_JSON).write_text(json.dumps(doc, separators=(",", ":")), encoding="utf-8")
        write_npz(path / LOG_NPZ, enc.arrays)

    @classmethod
    def load(cls, path: str | Path) -> OpLog:
        path = Path(path)
        try:
            doc = json.loads((path / LOG_JSON).read_text(encoding="utf-8"))
            with np.load(path / LOG_NPZ, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise InputError(f"not a saved op log: {e}", file=str(path)) from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise InputError(f"not a saved op log (format is not {FORMAT})",
                             file=str(path / LOG_JSON))
        recs = [OpRecord(r["t_start"], r["t_end"], r["component_id"], r["op_kind"],
                         r["op_name"], _decode(r["params"], arrays), r["dependency_ids"])
                for r in doc["records"]]
        return cls(recs)


class _Encoder:
    """Plain values → JSON values; arrays (and numpy scalars) → references into `arrays`,
    stored as raw bytes with their dtype name so bf16 / fp8 round-trip exactly."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self._seen: dict[int, str] = {}
        self._keep: list[Any] = []  # keeps encoded arrays alive so id() stays unique

    def encode(self, v: object) -> Any:
        if isinstance(v, np.ndarray | np.generic):
            return self._array(v)
        if isinstance(v, tuple):
            return {"__tuple__": [self.encode(x) for x in v]}
        if isinstance(v, list):
            return [self.encode(x) for x in v]
        if isinstance(v, dict):
            return {k: self.encode(x) for k, x in v.items()}
        return v

    def _array(self, v: np.ndarray) -> dict[str, Any]:
        key = self._seen.get(id(v))
        if key is None:
            key = f"a{len(self.arrays)}"
            a = np.asarray(v)
            self.arrays[key] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            self._seen[id(v)] = key
            self._keep.append(v)
        a = np.asarray(v)
        return {"__array__": key, "dtype": a.dtype.name, "shape": list(a.shape),
                "scalar": isinstance(v, np.generic)}


def _decode(v: object, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(v, list):
        return [_decode(x, arrays) for x in v]
    if isinstance(v, dict):
        if "__array__" in v:
            a = arrays[v["__array__"]].view(np_dtype(v["dtype"])).reshape(v["shape"])
            return a[()] if v["scalar"] else a
        if "__tuple__" in v:
            return tuple(_decode(x, arrays) for x in v["__tuple__"])
        return {k: _decode(x, arrays) for k, x in v.items()}
    return v
