"""PE_SCHEDULER: the sole dispatcher inside a PE.

SubmissionQueue (inbox, written by PE_CPU) → plan generation (the dispatcher) → the
single feeder (`_feed_tiles`) puts every tile of one command into its first stage's
queue before it starts the next command (no cross-command feed interleaving). A full
first-stage queue blocks only the feeder. Tiles self-route through the engines; the last
stage reports to the PipelineContext; when all tiles are done the scheduler appends a
completion record to the CompletionQueue and fires the command's `done` event.

Composite tiles hold `staging_bytes` of SchedulerReservedTCM from feed to completion:
the reserved region bounds how many tiles are in flight, and a tile larger than the
region is a CapacityError naming the command.
"""

from __future__ import annotations

import simpy

from kernbench.common.tile_plan import PipelineContext, Stage, StageType, TilePlan, TileToken
from kernbench.components.arbiter import call_after
from kernbench.components.base import ComponentBase
from kernbench.components.catalog import register
from kernbench.components.fabric import mypyc_attr
from kernbench.components.ports import Port
from kernbench.components.queues import HwQueue
from kernbench.components.signals import Signal
from kernbench.errors import CapacityError

#: the port whose engine serves each stage type (gemm / math: one peer per te_id / ve_id)
_PORT_FOR = {
    StageType.DMA_READ: "dma",
    StageType.DMA_WRITE: "dma",
    StageType.FETCH: "fetch_store",
    StageType.STORE: "fetch_store",
    StageType.GEMM: "gemm",
    StageType.MATH: "math",
}

#: the stage param that picks one of several engines of a stage type (default engine 0)
_ENGINE_INDEX = {StageType.GEMM: "te_id", StageType.MATH: "ve_id"}


def split_transfers(stages: list, limit: int) -> list:  # noqa: ANN001
    """Each DMA stage of more than `limit` bytes becomes ceil(nbytes / limit) consecutive
    transfers of at most `limit` bytes (rows shared out, addresses advancing). The data
    description stays on the last piece: the data moves once the whole transfer is done."""
    out = []
    for st, params in stages:
        nbytes = params.get("nbytes", 0)
        if nbytes <= limit or st not in (StageType.DMA_READ, StageType.DMA_WRITE):
            out.append((st, params))
            continue
        n = -(-nbytes // limit)
        rows = params.get("rows", 1)
        base = {k: v for k, v in params.items() if k != "data"}
        for i in range(n):
            piece = dict(base, nbytes=min(limit, nbytes - i * limit),
                         addr=params.get("addr", 0) + i * limit,
                         rows=max(1, -(-rows // n)))
            if i == n - 1 and "data" in params:
                piece["data"] = params["data"]
            out.append((st, piece))
    return out


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins may extend it
class PeScheduler(ComponentBase):
    PORTS = (
        Port("dma", "pe_dma"),
        Port("fetch_store", "pe_fetch_store"),
        Port("gemm", "pe_gemm", many=True, doc="tensor engines, te_id order"),
        Port("math", "pe_math", many=True, doc="vector engines, ve_id order"),
        Port("tcm", "pe_tcm", doc="owner of SchedulerReservedTCM"),
    )

    def __init__(self, node, sim) -> None:  # noqa: ANN001
        super().__init__(node, sim)
        self.inbox = HwQueue(self.env, capacity=self.spec.queue_depth)  # SubmissionQueue
        self.completion_queue: list[tuple[float, str]] = []
        self._pending_feeds = HwQueue(self.env)
        self._next_ctx = 0
        self.pe_id = node.pe

    def connect(self) -> None:
        self._by_index = {
            st: ([self.peer(name)] if name in ("dma", "fetch_store") else self.peers_of(name))
            for st, name in _PORT_FOR.items()
        }
        self.engines = {st: engs[0] for st, engs in self._by_index.items()}
        self._ports = {st: eng.port(st) for st, eng in self.engines.items()}
        self._ids = {st: eng.id for st, eng in self.engines.items()}
        tcm = self.peer("tcm")
        self.staging_capacity = tcm.reserved_bytes
        # SchedulerReservedTCM as a counting semaphore: no SimPy event unless a tile waits
        self.staging_free = tcm.reserved_bytes
        self._staging_waiters: list[tuple[int, simpy.Event]] = []
        self.staging_waits = 0  # tiles that waited for staging bytes
        if self.spec.shared_compute_slot:
            slot = simpy.Resource(self.env, capacity=1)
            for comp in (*self.peers_of("gemm"), *self.peers_of("math")):
                comp._slot = slot

    def start(self) -> None:
        """The dispatcher and the feeder, each a state machine whose waits are the events
        a SimPy process of the same loop would yield (components.channel's argument),
        except the wait on an empty queue: the item is handed over as it arrives
        (`HwQueue.wait`)."""
        self._delay = self.spec.dispatch_latency_cycles / self.spec.clock_ghz
        self._plans: list[TilePlan] | None = None  # the command being fed, its context,
        self._ctx: PipelineContext | None = None   # the next tile, and whether that tile
        self._tile = 0                              # already holds its staging bytes
        self._granted = False
        self._next_command()
        self._next_feed()

    def plan(self, cmd) -> list[TilePlan]:  # noqa: ANN001
        """Tile plans of `cmd`: DMA stages above `max_transfer_bytes` split ("if
        the DMA payload exceeds hardware tile size, PE_SCHEDULER splits the transfer"),
        and every tile's buffers checked against the TCM before anything is fed."""
        plans = []
        limit = self.spec.max_transfer_bytes
        stage = self._stage
        for t, stages in enumerate(cmd.tiles()):
            stages = self._fed(stages)
            if limit:
                stages = split_transfers(stages, limit)
            need = cmd.staging_bytes(t)
            if need > self.staging_capacity:
                raise CapacityError(
                    f"{self.id}: TCM overflow: {cmd.label} tile {t} needs {need} staging "
                    f"bytes, SchedulerReservedTCM has {self.staging_capacity}")
            plans.append(TilePlan(t, tuple([stage(st, params) for st, params in stages]),
                                  need))
        return plans

    def _fed(self, stages: list) -> list:  # noqa: ANN001
        """Each FETCH → GEMM → STORE run of `stages` as its tensor engine runs it
        (`PeGemm.fed_stages`: a streaming engine moves most bytes beside the math)."""
        for i in range(1, len(stages) - 1):
            if (stages[i][0] == StageType.GEMM and stages[i - 1][0] == StageType.FETCH
                    and stages[i + 1][0] == StageType.STORE):
                eng = self._by_index[StageType.GEMM][stages[i][1].get("te_id", 0)]
                stages = [*stages[:i - 1], *eng.fed_stages(*stages[i - 1:i + 2]),
                          *stages[i + 2:]]
        return stages

    def _stage(self, st: StageType, params: dict) -> Stage:
        key = _ENGINE_INDEX.get(st)
        if key is not None:
            idx = params.get(key, 0)
            if idx:
                eng = self._by_index[st][idx]
                return Stage(st, eng.id, params, eng.port(st))
        return Stage(st, self._ids[st], params, self._ports[st])

    # the dispatcher: SubmissionQueue → plans → the feeder's queue --------------------
    def _next_command(self) -> None:
        while True:
            cmd = self.inbox.take()
            if cmd is None:
                self.inbox.wait(self._took_command)
                return
            if self._accept(cmd):
                return

    def _took_command(self, cmd) -> None:  # noqa: ANN001
        if not self._accept(cmd):
            self._next_command()

    def _accept(self, cmd) -> bool:  # noqa: ANN001
        """`cmd` taken: after the dispatch latency, plan it; True when that waits."""
        tracer = self.sim.tracer
        if tracer.enabled:
            tracer.events.append((self.env._now, "command_submitted", self.id, cmd.label, -1))
        if self._delay:
            call_after(self.env, self._delay, lambda _ev: self._dispatch(cmd))
            return True
        self._plan_and_queue(cmd)
        return False

    def _dispatch(self, cmd) -> None:  # noqa: ANN001
        self._plan_and_queue(cmd)
        self._next_command()

    def _plan_and_queue(self, cmd) -> None:  # noqa: ANN001
        plans = self.plan(cmd)
        done = Signal(self._on_complete)
        ctx = PipelineContext(f"{self.pe_id}#{self._next_ctx}", len(plans), done, cmd, self)
        self._next_ctx += 1
        if not plans:
            done.succeed(ctx)
            return
        self._pending_feeds.offer((plans, ctx))  # unbounded: never waits

    # the feeder: every tile of one command into its first stage, then the next command
    def _next_feed(self) -> None:
        feed = self._pending_feeds.take()
        if feed is None:
            self._pending_feeds.wait(self._start_feed)
            return
        self._start_feed(feed)

    def _start_feed(self, feed: tuple[list[TilePlan], PipelineContext]) -> None:
        self._plans, self._ctx = feed
        self._tile = 0
        self._granted = False
        self._feed_tiles()

    def _feed_tiles(self) -> None:
        """Feed the current command's tiles from `_tile` on; return at a wait (staging
        bytes, a full first-stage queue), where the wait's event resumes it."""
        plans, ctx = self._plans, self._ctx
        assert plans is not None and ctx is not None  # _start_feed set them
        cmd = ctx.command
        while self._tile < len(plans):
            plan = plans[self._tile]
            need = plan.staging_bytes
            if need and not self._granted:
                if need > self.staging_capacity:
                    raise CapacityError(
                        f"{self.id}: TCM overflow: {cmd.label} tile {plan.tile_id} needs "
                        f"{need} staging bytes, SchedulerReservedTCM has "
                        f"{self.staging_capacity}"
                    )
                if need <= self.staging_free and not self._staging_waiters:
                    self.staging_free -= need
                else:  # release_staging grants the bytes and triggers the event
                    self.staging_waits += 1
                    ev = self.env.event()
                    self._staging_waiters.append((need, ev))
                    self._granted = True
                    ev.callbacks.append(self._resume_feed)
                    return
            self._granted = False
            self._tile += 1
            first = plan.stages[0]
            token = TileToken(plan.tile_id, ctx, plan, 0, first.params, cmd.data_op, cmd.label)
            ev = first.port.offer(token)
            if ev is not None:
                ev.callbacks.append(self._tile_put)
                return
            self._traced(plan)
        self._plans = self._ctx = None
        self._next_feed()

    def _resume_feed(self, _ev) -> None:  # noqa: ANN001
        self._feed_tiles()

    def _tile_put(self, _ev) -> None:  # noqa: ANN001
        plans = self._plans
        assert plans is not None  # a tile of the current command was put
        self._traced(plans[self._tile - 1])
        self._feed_tiles()

    def _traced(self, plan: TilePlan) -> None:
        tracer = self.sim.tracer
        if tracer.enabled:
            tracer.events.append((self.env._now, "sub_command_dispatched",
                                  plan.stages[0].component, self._ctx.command.label,
                                  plan.tile_id))

    def release_staging(self, plan: TilePlan) -> None:
        self.staging_free += plan.staging_bytes
        waiters = self._staging_waiters
        while waiters and waiters[0][0] <= self.staging_free:
            need, ev = waiters.pop(0)
            self.staging_free -= need
            ev.succeed()

    def _on_complete(self, event) -> None:  # noqa: ANN001
        ctx = event.value
        cmd = ctx.command
        now = self.env._now
        tracer = self.sim.tracer
        if tracer.enabled:  # a record per command: kept only while tracing
            self.completion_queue.append((now, cmd.label))
            tracer.events.append((now, "command_complete", self.id, cmd.label, -1))
        self.sim.command_complete(cmd, now)


# registered here, not by a decorator: mypyc compiles a decorated class as plain Python
register("pe_scheduler", "pe_scheduler_v2")(PeScheduler)
