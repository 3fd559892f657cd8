"""The op log (ADR-0020 D2/D5): what the data pass must execute, recorded by the
component base-class hooks only.

Contract with the front ends: a stage's params dict carries the data description under
the key ``"data"``: a dict with ``"op_kind"`` ("memory" | "gemm" | "math"), ``"op_name"``
and the D5 params (see docs/data-pass.md). Stages without ``"data"`` are timing-only and
are not logged. Two optional keys link records explicitly (D5 dependency_ids):
``"op_id"`` (any hashable the front end chooses) names the record, ``"after"`` lists
op_ids it depends on; they become `dependency_ids` (record indices).

Records come out ordered by t_start, ties in insertion order (the hooks fire in SimPy
time order, so insertion order already is that order). With no logger injected the
hooks are never called: zero cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_META = ("op_kind", "op_name", "op_id", "after")


@dataclass(slots=True)
class OpRecord:
    t_start: float
    t_end: float
    component_id: str
    op_kind: str  # "memory" | "gemm" | "math"
    op_name: str
    params: dict[str, Any]
    dependency_ids: list[int] = field(default_factory=list)


class OpLogger:
    """Injected into Simulator(op_logger=...); the D2 hooks call record_start/record_end."""

    def __init__(self) -> None:
        self.records: list[OpRecord] = []
        self._open: dict[int, OpRecord] = {}
        self._by_op_id: dict[Any, int] = {}

    def _data(self, msg: Any) -> dict[str, Any] | None:
        p = getattr(msg, "params", None)
        if not p:
            return None
        return p.get("data")

    def record_start(self, t: float, component_id: str, msg: Any) -> None:
        d = self._data(msg)
        if d is None:
            return
        params = {k: v for k, v in d.items() if k not in _META}
        deps = [self._by_op_id[a] for a in d.get("after", ()) if a in self._by_op_id]
        rec = OpRecord(float(t), float("nan"), component_id, d["op_kind"], d["op_name"],
                       params, deps)
        idx = len(self.records)
        self.records.append(rec)
        if "op_id" in d:
            self._by_op_id[d["op_id"]] = idx
        self._open[id(msg)] = rec

    def record_end(self, t: float, component_id: str, msg: Any) -> None:
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

    def __len__(self) -> int:
        return len(self.records)
