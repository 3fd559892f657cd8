"""Deterministic trace recording.

Two streams, both appended in simulation order (so identical inputs give identical logs):
- `events`: (t_ns, name, component, label, tile) for command_submitted,
  sub_command_dispatched, tile_ready, command_complete, barrier_pass;
- `spans`: (component, channel, start_ns, end_ns, label, tile, stage) — one per engine
  service, i.e. an engine_start / engine_complete pair, appended by PeEngineBase's
  worker loop directly (it is the simulator's hot path).
Recording is a list append; export (report/perfetto.py) turns them into trace JSON in a
canonical order (time, then names), not in the order same-instant events happened to run.
"""

from __future__ import annotations


class Tracer:
    __slots__ = ("events", "spans", "enabled")

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.events: list[tuple[float, str, str, str, int]] = []
        self.spans: list[tuple[str, str, float, float, str, int, int]] = []

    def event(self, t: float, name: str, component: str, label: str, tile: int = -1) -> None:
        if self.enabled:
            self.events.append((t, name, component, label, tile))

    def event_log(self) -> list[tuple[float, str, str, str, int]]:
        """All trace events, engine_start/engine_complete included, in time order."""
        out = list(self.events)
        for comp, ch, s, e, label, tile, _ in self.spans:
            out.append((s, "engine_start", f"{comp}.{ch}", label, tile))
            out.append((e, "engine_complete", f"{comp}.{ch}", label, tile))
        order = {"engine_complete": 0, "tile_ready": 1, "command_complete": 2}
        return sorted(out, key=lambda ev: (ev[0], order.get(ev[1], 3), *ev[1:]))
