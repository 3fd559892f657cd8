"""The pass manager: verification after the passes that change the IR, invariant checks
after the passes that produce them, timings, dumps; and `kernbench compile --time-passes`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import pytest
from tiny_ir import compile_until, gemm_graph

from kernbench.cli import main
from kernbench.compiler.checks import InvariantError, check_deps
from kernbench.compiler.manager import PassManager
from kernbench.compiler.pipeline import PASS_NAMES, PASSES
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.errors import CapacityError, InputError
from kernbench.ir.model import LayerIR
from kernbench.topology import load_topology


@dataclass(frozen=True)
class _DropInput:
    """Breaks the IR: the GEMM reads a tensor that does not exist."""

    name: str = "drop_input"
    changes_ir: ClassVar[bool] = True
    produces: ClassVar[tuple[str, ...]] = ()

    def apply(self, state: CompileState) -> CompileState:
        state.graph.nodes.append(LayerIR(id="bad", op_type="GELU", inputs=["nowhere"],
                                         outputs=["y2"]))
        return state


@dataclass(frozen=True)
class _Squash:
    """Breaks an invariant it claims to produce: `what` is "tcm" or "deps"."""

    name: str = "squash"
    what: str = "tcm"
    changes_ir: ClassVar[bool] = False
    produces: ClassVar[tuple[str, ...]] = ("tcm", "deps")

    def apply(self, state: CompileState) -> CompileState:
        for op in state.tiles.ops:
            if self.what == "tcm":
                for _, b in op.reads + op.writes:
                    b.offset, b.bank, b.bank_offset = 0, 0, 0
            else:
                op.deps = []
        return state


def _state() -> CompileState:
    g, feeds = gemm_graph(gelu=True)
    return CompileState(g, load_topology("small"), CompileOptions(calib_inputs=feeds))


def test_manager_times_every_pass_and_its_checks():
    pm = PassManager(PASSES)
    state = pm.run(_state())
    assert state.cmdq is not None
    assert tuple(pm.timings) == tuple(pm.check_timings) == PASS_NAMES
    assert all(t >= 0 for t in list(pm.timings.values()) + list(pm.check_timings.values()))
    lines = pm.timing_lines()
    assert len(lines) == len(PASS_NAMES) + 2 and lines[-1].split()[0] == "total"


def test_manager_dumps_after_a_named_pass(tmp_path):
    PassManager(PASSES, dump_after=("tiling",), dump_dir=tmp_path).run(_state())
    assert [p.name for p in tmp_path.iterdir()] == ["after-tiling.txt"]
    text = (tmp_path / "after-tiling.txt").read_text(encoding="utf-8")
    assert "TE_GEMM_TILE" in text and "VE_GELU_TILE" in text


def test_manager_rejects_an_unknown_dump_name():
    with pytest.raises(InputError, match="no pass named 'tilling'"):
        PassManager(PASSES, dump_after=("tilling",)).run(_state())


def test_manager_verifies_the_ir_after_a_pass_that_changes_it():
    with pytest.raises(InputError, match="nowhere"):
        PassManager([_DropInput()]).run(_state())
    # without verification the broken IR goes through unnoticed
    PassManager([_DropInput()], verify=False).run(_state())


@pytest.mark.parametrize(("what", "error", "message"), [
    ("tcm", CapacityError, "overlap in TCM"),
    ("deps", InvariantError, "without waiting for its writer"),
])
def test_manager_checks_the_invariants_a_pass_produces(what, error, message):
    state = compile_until(*gemm_graph(gelu=True), "schedule")
    with pytest.raises(error, match=message):
        PassManager([_Squash(what=what)]).run(state)


def test_manager_refuses_a_pass_with_an_unknown_product():
    @dataclass(frozen=True)
    class Odd:
        name: str = "odd"
        changes_ir: ClassVar[bool] = False
        produces: ClassVar[tuple[str, ...]] = ("vibes",)

        def apply(self, state: CompileState) -> CompileState:
            return state

    with pytest.raises(ValueError, match="no check named"):
        PassManager([Odd()])
    with pytest.raises(ValueError, match="unique"):
        PassManager([PASSES[0], dataclasses.replace(PASSES[1], name=PASSES[0].name)])


def test_cli_prints_pass_times_only_when_asked(tmp_path, capsys):
    g, _ = gemm_graph()
    g.save(tmp_path / "ir.json")
    assert main(["compile", str(tmp_path / "ir.json"), "-o", str(tmp_path / "a")]) == 0
    assert "tcm_alloc" not in capsys.readouterr().err
    assert main(["compile", str(tmp_path / "ir.json"), "-o", str(tmp_path / "b"),
                 "--time-passes"]) == 0
    err = capsys.readouterr().err
    rows = [ln.split() for ln in err.splitlines() if ln.split()[:1] in ([n] for n in PASS_NAMES)]
    assert [r[0] for r in rows] == list(PASS_NAMES)
    assert all(float(r[1]) >= 0 and float(r[2]) >= 0 for r in rows)


@pytest.mark.parametrize("bad", ["self", "later", "negative", "unsorted", "repeated"])
def test_deps_check_refuses_dependencies_that_are_not_earlier_ops_in_order(bad):
    state = compile_until(*gemm_graph(gelu=True), "schedule")
    ops = state.require_tiles().ops
    op = next(o for o in ops[2:] if o.deps)
    check_deps(state)  # as scheduled: fine
    op.deps = {"self": [op.index], "later": [0, op.index + 1], "negative": [-1, 0],
               "unsorted": [1, 0], "repeated": [0, 0]}[bad]
    with pytest.raises(InvariantError, match="that are not earlier ops in order"):
        check_deps(state)
