"""What the hardware counted during a run, as typed records (the simulator → report hand-off).

The simulator (`Simulator.counters()`) snapshots every engine, link and memory into a
`HardwareCounters`; report/stats.py turns it into stats.json. Raw values only (busy time
in ns, bytes, op counts): rounding and utilizations are the report's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ServerCounters:
    """One reservation server: a link direction, a memory channel or port."""

    id: str
    bytes: int
    busy_ns: float


@dataclass(frozen=True, slots=True)
class EngineCounters:
    """One pipeline engine (PeEngineBase): busy time per channel, ops served, and the
    kind's own counters (`extra`: e.g. `macs` of pe_gemm, `bytes_read` of pe_dma)."""

    id: str
    kind: str
    busy_ns: float
    channel_busy_ns: dict[str, float]
    ops: int
    extra: dict[str, int | float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MemoryCounters:
    """One memory (HBM controller, shared SRAM, TCM port). An interleaved memory reports its
    channels (and no busy time of its own); a single-port one reports `busy_ns`."""

    id: str
    kind: str
    bytes: int
    busy_ns: float | None = None
    channels: tuple[ServerCounters, ...] = ()


@dataclass(frozen=True, slots=True)
class HardwareCounters:
    """Every counter of a finished run, each group sorted by id."""

    topology: str
    clock_ghz: float  # the PE_GEMM clock stats.json reports cycles in
    commands_completed: int
    engines: tuple[EngineCounters, ...]
    links: tuple[ServerCounters, ...]
    memories: tuple[MemoryCounters, ...]
