"""Commands and Control-FSM entries pickle as their constructor's call (common.pickling):
a round trip gives an equal object of the same class, every field included, and a
dataclass with a field outside __init__ is refused rather than pickled without it."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field, fields

import pytest

from kernbench.common.pe_commands import (
    CompositeCmd,
    DmaRead,
    DmaWrite,
    GemmCmd,
    MathCmd,
    PeCommand,
)
from kernbench.common.pickling import constructor_reduce
from kernbench.common.program import ProgramEntry
from kernbench.common.tile_plan import StageType


def _values(obj: object) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _commands() -> list[PeCommand]:
    meta = {"entry_id": 3, "layer_id": "l0.qkv"}
    return [
        DmaRead(label="#3 DMA", meta=meta, params={"nbytes": 64, "addr": 128}),
        DmaWrite(label="#4 DMA", params={"nbytes": 32, "rows": 2}, submit_ns=1.5),
        GemmCmd(label="#5 TE", params={"m": 4, "n": 8, "k": 16}, fetch_nbytes=96,
                store_nbytes=128, end_ns=9.0),
        MathCmd(label="#6 VE", params={"op": "add"}, fetch_nbytes=16, store_nbytes=16),
        CompositeCmd(label="#7 TE", tile_stages=[[(StageType.GEMM, {"m": 4})]],
                     tile_staging_bytes=[256], start_ns=3.25),
    ]


@pytest.mark.parametrize("cmd", _commands(), ids=lambda c: type(c).__name__)
def test_a_command_round_trips_with_every_field(cmd):
    back = pickle.loads(pickle.dumps(cmd, pickle.HIGHEST_PROTOCOL))
    assert type(back) is type(cmd) and _values(back) == _values(cmd)
    assert pickle.loads(pickle.dumps(cmd, 2)).label == cmd.label


def test_a_program_entry_round_trips_with_its_command():
    e = ProgramEntry(7, "command", pe=3, command=_commands()[0], deps=(1, 2), label="#7 x",
                     end_ns=2.0, info={"a": 1})
    back = pickle.loads(pickle.dumps([e, e], pickle.HIGHEST_PROTOCOL))
    assert back[0] is back[1]  # shared references stay shared
    assert _values(back[0]) | {"command": None} == _values(e) | {"command": None}
    assert _values(back[0].command) == _values(e.command)


def test_a_field_outside_init_is_refused():
    @dataclass(slots=True)
    class Odd:
        a: int = 0
        b: list = field(default_factory=list, init=False)

    with pytest.raises(TypeError, match="outside __init__"):
        constructor_reduce(Odd())
