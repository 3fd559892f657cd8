"""ADR-0020 D4: a message is logged for the data pass because its own type says it moves
or computes data (`data_op = True`), not because of a framework default. The base
command is not a data op; every command type that carries data is."""

from __future__ import annotations

import dataclasses

from kernbench.common import pe_commands as pc


def _default(cls: type) -> object:
    return {f.name: f.default for f in dataclasses.fields(cls)}["data_op"]


def test_the_base_command_is_not_a_data_op():
    assert _default(pc.PeCommand) is False


def test_every_command_type_that_moves_or_computes_data_is_one():
    kinds = [pc.DmaRead, pc.DmaWrite, pc.GemmCmd, pc.MathCmd, pc.CompositeCmd]
    concrete = {c for c in vars(pc).values() if isinstance(c, type)
                and issubclass(c, pc.PeCommand) and c not in (pc.PeCommand,
                                                               pc.FetchComputeStoreCmd)}
    assert concrete == set(kinds)  # a new command type must be added here, and decide
    for cls in kinds:
        assert _default(cls) is True and cls().data_op is True, cls.__name__
    assert pc.DmaRead(data_op=False).data_op is False  # an instance may still opt out
