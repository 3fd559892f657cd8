"""Control-FSM entries sent as JSON (common.entry_codec): a round trip gives the same
objects, field for field and type for type (a tuple stays a tuple, a StageType a
StageType, a numpy scalar its dtype), and anything that is not data is refused on both
sides."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields

import numpy as np
import pytest

from kernbench.common import entry_codec
from kernbench.common.pe_commands import CompositeCmd, DmaRead, DmaWrite, GemmCmd, MathCmd
from kernbench.common.program import ProgramEntry
from kernbench.common.tile_plan import StageType


def _values(obj: object) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _entries() -> list[ProgramEntry]:
    meta = {"entry_id": 3, "layer_id": "l0.qkv"}
    cmds = [
        DmaRead(label="#3 DMA", meta=meta, params={"nbytes": 64, "addr": 128}),
        DmaWrite(label="#4 DMA", params={"nbytes": 32, "rows": 2}, submit_ns=1.5),
        GemmCmd(label="#5 TE", params={"m": 4, "n": 8, "k": 16}, fetch_nbytes=96,
                store_nbytes=128, end_ns=9.0),
        MathCmd(label="#6 VE", params={"op": "add", "ranges": [(0, 4), (8, 12)],
                                       "scale": np.float32(0.1), "inf": math.inf}),
        CompositeCmd(label="#7 TE", tile_stages=[[(StageType.GEMM, {"m": 4}),
                                                  (StageType.STORE, {"nbytes": 8})]],
                     tile_staging_bytes=[256], start_ns=3.25),
    ]
    out = [ProgramEntry(i, "command", pe=i % 3, command=c, deps=(1, 2), label=f"#{i}")
           for i, c in enumerate(cmds)]
    return out + [ProgramEntry(9, "barrier", wait_for=(4, 5), label="#9 BARRIER")]


def test_entries_come_back_the_same_type_for_type():
    sent = _entries()
    back = entry_codec.loads(entry_codec.dumps(sent))
    for a, b in zip(sent, back, strict=True):
        assert type(b) is ProgramEntry and type(b.command) is type(a.command)
        assert _values(b) | {"command": None} == _values(a) | {"command": None}
        assert type(b.deps) is tuple and type(b.wait_for) is tuple
        if a.command is not None:
            assert _values(b.command) == _values(a.command)
    stages = back[4].command.tile_stages[0]
    assert type(stages[0]) is tuple and stages[0][0] is StageType.GEMM
    ranges, scale = back[3].command.params["ranges"], back[3].command.params["scale"]
    assert type(ranges) is list and type(ranges[0]) is tuple
    assert type(scale) is np.float32 and scale == np.float32(0.1)


def test_plain_chunks_pass_as_json_does():
    chunk = [{"id": 0, "deps_before": [1, 2], "name": "x"}, {"id": 1, "f": -0.0}]
    assert entry_codec.loads(entry_codec.dumps(chunk)) == chunk
    assert entry_codec.dumps(chunk) == json.dumps(chunk, separators=(",", ":")).encode()


@pytest.mark.parametrize("value", [lambda: 0, {1: "a"}, {"\0t": [1]}, {1, 2}, b"x",
                                   np.zeros(2)], ids=["code", "int-key", "tag-key", "set",
                                                      "bytes", "array"])
def test_what_is_not_data_is_not_sent(value):
    with pytest.raises(TypeError, match="cannot send"):
        entry_codec.dumps([{"x": value}])


def test_only_the_known_command_classes_are_built():
    with pytest.raises(ValueError, match="no command class 'os'"):
        entry_codec.loads(b'[{"\\u0000c":["os",[]]}]')


def test_a_dataclass_field_outside_init_is_refused():
    @dataclass
    class Odd(ProgramEntry):
        extra: list = field(default_factory=list, init=False)

    with pytest.raises(TypeError, match="outside __init__"):
        entry_codec._names(Odd)
