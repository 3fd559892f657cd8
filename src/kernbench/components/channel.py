"""One channel of a pipeline stage as a state machine: the engine's worker loop without
a SimPy process.

A channel takes a token from its inbox (waiting with `HwQueue.wait` when it is empty: the
token is handed over as it arrives), acquires the shared compute slot when its
engine has one, asks the engine's `service` for the busy time (a number) or the event
that ends it, then forwards the token to its next stage (or completes the tile) and takes
the next one. Every other wait is the event a SimPy process would have yielded (the
slot's request, the busy time's timeout, the service's event, a put into a full next
queue), and the continuation is registered on it at the moment the process would have
registered its resumption; only the generator and its resumptions are gone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

import simpy

from kernbench.components.arbiter import LoopEvent, call_after

if TYPE_CHECKING:
    from kernbench.common.tile_plan import TileToken
    from kernbench.components.queues import HwQueue


class Engine(Protocol):
    """What a channel reads of its engine (a PeEngineBase, which imports this module)."""

    env: simpy.Environment
    sim: Any
    id: str
    ops: Any
    busy_ns: float
    channel_busy_ns: dict
    _slot: simpy.Resource | None
    _op_logger: Any

    def service(self, token: TileToken) -> float | simpy.Event | LoopEvent: ...
    def _on_process_start(self, env: simpy.Environment, msg: object) -> None: ...
    def _on_process_end(self, env: simpy.Environment, msg: object) -> None: ...


class Channel:
    """The worker of channel `name` of `eng` (a PeEngineBase), serving `inbox`."""

    __slots__ = ("eng", "name", "inbox", "env", "token", "req", "start", "tracer", "logger",
                 "tile_done")

    def __init__(self, eng: Engine, name: str, inbox: HwQueue) -> None:
        self.eng = eng
        self.name = name
        self.inbox = inbox
        self.env = eng.env
        self.tracer = eng.sim.tracer
        self.logger = eng._op_logger
        self.tile_done = eng.sim.tile_done
        self.token: TileToken | None = None
        self.req: simpy.Event | None = None
        self.start = 0.0

    def take(self) -> None:
        """Idle: serve the oldest token of the inbox, or wait for one."""
        token = self.inbox.take()
        if token is None:
            # without a shared compute slot, a token is served as it is acquired
            self.inbox.wait(self._acquire if self.eng._slot is not None else self._serve)
        elif self.eng._slot is not None:
            self._acquire(token)
        else:
            self._serve(token)

    def _acquire(self, token: TileToken) -> None:
        slot = self.eng._slot
        if slot is None:
            self._serve(token)
            return
        self.token = token
        req = self.req = slot.request()
        req.callbacks.append(self._granted)

    def _granted(self, _ev: object) -> None:
        token = self.token
        assert token is not None  # _acquire set it
        self._serve(token)

    def _serve(self, token: TileToken) -> None:
        self.token = token
        env = self.env
        start = self.start = env._now
        cmd = token.pipeline_ctx.command
        if cmd.start_ns is None:
            cmd.start_ns = start
        if self.logger is not None:
            self.eng._on_process_start(env, token)
        d = self.eng.service(token)
        if d.__class__ is float or d.__class__ is int:
            busy = cast(float, d)
            if busy > 0:
                call_after(env, busy, self._served)
            else:
                self._served(None)
        else:
            ev: Any = d  # a SimPy event or a LoopEvent: its callbacks are what is read
            if ev.callbacks is not None:
                ev.callbacks.append(self._served)
            else:
                self._served(ev)

    def _served(self, _ev: object) -> None:
        token = self.token
        assert token is not None  # _serve set it
        eng = self.eng
        env = self.env
        end = env._now
        if self.logger is not None:
            eng._on_process_end(env, token)
        req = self.req
        if req is not None:
            cast(simpy.Resource, eng._slot).release(cast(Any, req))
            self.req = None
        busy = end - self.start
        eng.busy_ns += busy
        eng.channel_busy_ns[self.name] += busy
        eng.ops += 1
        idx = token.stage_idx
        stages = token.plan.stages
        if self.tracer.enabled:
            self.tracer.spans.append((eng.id, self.name, self.start, end, token.label,
                                      token.tile_id, int(stages[idx].stage_type)))
        idx += 1
        self.token = None
        if idx < len(stages):
            nxt = stages[idx]
            token.stage_idx = idx
            token.params = nxt.params
            if nxt.port is self.inbox:
                # the next stage is this channel's own (a split transfer's next piece):
                # serve it now; putting it back into a full inbox would wait on itself
                self._acquire(token)
                return
            ev = nxt.port.offer(token)
            if ev is not None:
                ev.callbacks.append(self._forwarded)
                return
        else:
            self.tile_done(token, end)
        self.take()

    def _forwarded(self, _ev: object) -> None:
        self.take()
