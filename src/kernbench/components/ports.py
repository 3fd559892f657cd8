"""Declared, typed ports (in the spirit of gem5's named ports) and the simulator interface.

A component class lists its ports in `PORTS`: a name and the `kind` of component at the
other end; a vector port (`many=True`) takes any number of peers, in wiring order. The
topology builder wires ports (`Topology.wires`); the simulator binds each wire to the two
component instances. Binding checks that the port is declared by the class, that the peer
has the declared kind, and, once all wires are bound, that every required port is
connected: a mistake is an `InputError` naming the node and the port at build time, never
a KeyError in the middle of a run.

`SimContext` is what a component may ask of the simulator that runs it. The simulator
(kernbench.sim_engine.engine) implements it; components depend on this Protocol only, so
the hardware blocks never import the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kernbench.common.pe_commands import PeCommand
from kernbench.common.tile_plan import TileToken
from kernbench.errors import InputError

if TYPE_CHECKING:
    import simpy

    from kernbench.components.actions import ActionLedger
    from kernbench.components.arbiter import Arbiter
    from kernbench.components.fabric import Stage
    from kernbench.topology.model import Pe, Topology


@dataclass(frozen=True, slots=True)
class Port:
    """One declared port: `name`, the `peer_kind` it connects to, vector or not."""

    name: str
    peer_kind: str
    many: bool = False       # a vector port: a list of peers in wiring order
    optional: bool = False   # may be left unconnected
    doc: str = ""


class TraceSink(Protocol):
    """The tracer the simulator hands to components (kernbench.sim_engine.tracer.Tracer)."""

    enabled: bool
    events: list[tuple[float, str, str, str, int]]
    spans: list[tuple[str, str, float, float, str, int, int]]

    def event(self, t: float, name: str, component: str, label: str, tile: int = -1) -> None:
        """Record one trace event (no-op when disabled)."""
        ...


class OpLogSink(Protocol):
    """Where the op-log hooks record data ops (kernbench.sim_engine.op_log.OpLogger)."""

    def record_start(self, t: float, component: str, msg: object) -> None:
        """A data op starts on `component` at `t`."""
        ...

    def record_end(self, t: float, component: str, msg: object) -> None:
        """A data op ends on `component` at `t`."""
        ...


class SimContext(Protocol):
    """What a component needs from the simulator that runs it."""

    env: simpy.Environment
    tracer: TraceSink
    op_logger: OpLogSink | None
    topology: Topology
    actions: ActionLedger  # what the engines did, counted with their timing (energy)
    arbiter: Arbiter  # grants same-instant reservations in (command, tile, stage) order

    def tile_done(self, token: TileToken, now: float) -> None:
        """The last stage of a tile's plan finished at `now` (called once per tile)."""
        ...

    def command_complete(self, cmd: PeCommand, now: float) -> None:
        """A PE command's completion record was published at `now`."""
        ...

    def dma_stages(self, pe: Pe, space: str, addr: int, nbytes: int, write: bool,
                   what: str) -> list[Stage]:
        """The contended stages of a transfer between `pe`'s TCM and memory at `addr`."""
        ...

    def read_request_ns(self, pe: Pe, space: str, addr: int) -> float:
        """Time the request of a read of memory at `addr` takes to reach another chip: the
        latency of the chip links between (0 on the PE's own chip)."""
        ...

    def mcast_stages(self, pe: Pe, dst_pes: list[int], nbytes: int) -> list[Stage]:
        """The contended stages of a copy from `pe`'s TCM into the TCMs of `dst_pes`."""
        ...

    def command_path(self, cube_id: str, pe: Pe, to_pe: bool) -> tuple[Stage, ...]:
        """The links between a cube's M_CPU and a PE (command out, or completion back)."""
        ...


def declared(cls: type, name: str, where: str) -> Port:
    """The Port `name` that `cls` declares; InputError naming `where` if it declares none."""
    for p in getattr(cls, "PORTS", ()):
        if p.name == name:
            return p
    known = ", ".join(p.name for p in getattr(cls, "PORTS", ())) or "none"
    raise InputError(f"{cls.__name__} declares no port '{name}' (declared: {known})",
                     where=where, field="impl")
