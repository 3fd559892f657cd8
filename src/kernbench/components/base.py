"""ComponentBase and PeEngineBase: the two shapes a hardware block takes.

*ComponentBase* is any node of the topology: it has an id, its config spec, declared
ports (`PORTS`, components.ports; bound by the simulator from the topology's wires, read
with `peer(name)` / `peers_of(name)`) and the op-log hooks `_on_process_start` /
`_on_process_end`, the only place the op log is written. A block that only serves
reservations (router, HBM controller, TCM port, SRAM) needs nothing else. It reaches the
simulator through the `SimContext` Protocol only (never by importing sim_engine).

*PeEngineBase* is a pipeline stage: inboxes whose capacity is the hardware
queue depth, one worker per inbox (a "channel", components.channel), and the common loop
take token → hooks → service → trace → forward to the next stage named by the token's
plan, or complete the tile. Subclasses implement `service(token)` only: return the busy
time in ns (a float), or an event to wait on: a SimPy event, or `arbiter.pending()`,
which `arbiter.done_at` triggers when a grant has decided the service's end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import simpy

from kernbench.components.arbiter import LoopEvent
from kernbench.components.channel import Channel
from kernbench.components.counters import MemoryCounters
from kernbench.components.fabric import mypyc_attr
from kernbench.components.ports import Port, SimContext, declared
from kernbench.components.queues import HwQueue
from kernbench.errors import InputError

if TYPE_CHECKING:
    from kernbench.common.tile_plan import TileToken
    from kernbench.topology.model import Node


@mypyc_attr(allow_interpreted_subclasses=True)  # every block not compiled extends it
class ComponentBase:
    KIND: ClassVar[str] = ""
    IMPL: ClassVar[str] = ""
    #: the ports this class declares; the topology builder wires them, the simulator binds
    PORTS: ClassVar[tuple[Port, ...]] = ()

    def __init__(self, node: Node, sim: SimContext) -> None:
        self.node = node
        self.id = node.id
        self.spec = node.spec
        self.sim = sim
        self.env: simpy.Environment = sim.env
        self._peers: dict[str, Any] = {}
        self._op_logger = sim.op_logger
        self.busy_ns = 0.0

    # ports --------------------------------------------------------------------
    def bind(self, name: str, peer: ComponentBase) -> None:
        """Connect port `name` to `peer`; InputError if undeclared, mistyped or doubly wired."""
        port = declared(type(self), name, self.id)
        if port.peer_kind != peer.KIND:
            raise InputError(f"port '{name}' takes a {port.peer_kind}, wired to {peer.id} "
                             f"(a {peer.KIND})", where=self.id, field="impl")
        if port.many:
            self._peers.setdefault(name, []).append(peer)
        elif name in self._peers:
            raise InputError(f"port '{name}' is wired twice ({self._peers[name].id}, {peer.id})",
                             where=self.id, field="impl")
        else:
            self._peers[name] = peer

    def check_ports(self) -> None:
        """InputError naming the first required port no wire connected."""
        for port in self.PORTS:
            if not port.optional and port.name not in self._peers:
                raise InputError(f"port '{port.name}' ({port.peer_kind}) is not connected",
                                 where=self.id, field="impl")

    def peer(self, name: str) -> Any:
        """The component on scalar port `name`."""
        return self._peers[name]

    def peers_of(self, name: str) -> list[Any]:
        """The components on vector port `name`, in wiring order (empty if none)."""
        return self._peers.get(name, [])

    # wiring and start-up -------------------------------------------------
    def connect(self) -> None:
        """Take what the component needs from its bound peers (called once all are bound)."""

    def start(self) -> None:
        """Start SimPy processes (called after connect)."""

    # op-log hooks --------------------------------------------------------
    def _on_process_start(self, env: simpy.Environment, msg: object) -> None:
        if self._op_logger is not None and getattr(msg, "data_op", False):
            self._op_logger.record_start(env._now, self.id, msg)

    def _on_process_end(self, env: simpy.Environment, msg: object) -> None:
        if self._op_logger is not None and getattr(msg, "data_op", False):
            self._op_logger.record_end(env._now, self.id, msg)

    # reporting --------------------------------------------------------------
    def stats(self) -> dict[str, int | float]:
        """An engine's own counters, reported beside its busy time (e.g. `macs`)."""
        return {}

    def memory_counters(self) -> MemoryCounters | None:
        """A memory's counters (bytes, busy time or channels); None for non-memories."""
        return None

    @property
    def clock_ghz(self) -> float:
        return getattr(self.spec, "clock_ghz", 1.0)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"


@mypyc_attr(allow_interpreted_subclasses=True)
class PeEngineBase(ComponentBase):
    """A pipeline stage with one worker per channel (chained by inboxes)."""

    #: channel name → the stage types it serves; most engines have one channel.
    CHANNELS: ClassVar[dict[str, tuple[int, ...]]] = {"main": ()}

    def __init__(self, node: Node, sim: SimContext) -> None:
        super().__init__(node, sim)
        depth = getattr(self.spec, "queue_depth", 4)
        self.inboxes: dict[str, HwQueue] = {
            ch: HwQueue(self.env, capacity=depth) for ch in self.CHANNELS
        }
        self._port_by_stage: dict[int, HwQueue] = {}
        for ch, stypes in self.CHANNELS.items():
            for st in stypes:
                self._port_by_stage[int(st)] = self.inboxes[ch]
        self.channel_busy_ns: dict[str, float] = {ch: 0.0 for ch in self.CHANNELS}
        self.ops = 0
        self._slot: simpy.Resource | None = None  # shared compute slot, if any

    def port(self, stage_type: int) -> HwQueue:
        return self._port_by_stage[int(stage_type)]

    def start(self) -> None:
        """One worker per channel (components.channel), waiting for its first token."""
        for ch, box in self.inboxes.items():
            Channel(self, ch, box).take()

    def service(self, token: TileToken) -> float | simpy.Event | LoopEvent:
        raise NotImplementedError
