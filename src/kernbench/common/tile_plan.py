"""Pipeline vocabulary: stages, tile plans, pipeline contexts and tile tokens.

PE_SCHEDULER turns every command into TilePlans. A plan is the ordered stages one tile
passes through; a TileToken carries its plan, so each engine forwards the token to the
next stage itself (token self-routing) and only the last stage reports completion, once,
to the PipelineContext.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class StageType(IntEnum):
    DMA_READ = 0
    FETCH = 1
    GEMM = 2
    MATH = 3
    STORE = 4
    DMA_WRITE = 5


@dataclass(slots=True)
class Stage:
    """One step of a tile: which engine (topology node id) and with what parameters.

    `port` is the engine's inbox for this stage type, resolved once by the scheduler so
    that forwarding a token is a single `put`.
    """

    stage_type: StageType
    component: str
    params: dict[str, Any]
    port: Any = None


@dataclass(frozen=True, slots=True)
class TilePlan:
    tile_id: int
    stages: tuple[Stage, ...]
    staging_bytes: int = 0  # SchedulerReservedTCM bytes the tile holds until it completes


class PipelineContext:
    """Completion aggregation for one command: exactly-once per tile."""

    __slots__ = ("id", "total_tiles", "completed_tiles", "done_event", "command", "owner")

    def __init__(
        self, id: str, total_tiles: int, done_event: Any, command: Any, owner: Any = None
    ) -> None:
        self.id = id
        self.owner = owner
        self.total_tiles = total_tiles
        self.completed_tiles = 0
        self.done_event = done_event
        self.command = command

    def complete_tile(self) -> None:
        self.completed_tiles += 1
        if self.completed_tiles > self.total_tiles:
            raise RuntimeError(f"pipeline {self.id}: tile completed twice")
        if self.completed_tiles == self.total_tiles:
            self.done_event.succeed(self)


@dataclass(slots=True)
class TileToken:
    """A tile in flight; owned by exactly one component at a time."""

    tile_id: int
    pipeline_ctx: PipelineContext
    plan: TilePlan
    stage_idx: int
    params: dict[str, Any]
    data_op: bool = True
    label: str = field(default="")

    @property
    def stage(self) -> Stage:
        return self.plan.stages[self.stage_idx]
