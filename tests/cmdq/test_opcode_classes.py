"""One class per opcode (ADR-0204): adding an opcode is one class; every registered opcode
carries all its facts; validate checks everything simulate relies on."""

from __future__ import annotations

import copy
import math
import random
from typing import Annotated, Any, ClassVar, Literal, get_args, get_origin

import numpy as np
import pytest
from pydantic import Field

from kernbench.cmdq.hw import TcmData, limits_for
from kernbench.cmdq.io import parse_program
from kernbench.cmdq.opcodes import NO_DATA, Opcode, register_opcode, registered
from kernbench.cmdq.opcodes.base import ENGINES, TIMINGS
from kernbench.cmdq.opcodes.registry import MODEL_BY_OPCODE, missing_facts
from kernbench.cmdq.opcodes.ve import VeVectorTile
from kernbench.cmdq.schema import CmdqProgram
from kernbench.cmdq.validate import validate_document, validate_program
from kernbench.config.schema import DEFAULT_MATH_OP_CYCLES
from kernbench.errors import InputError
from kernbench.host.simulate import simulate_program
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.math_ops import MATH_OPS
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLogger
from kernbench.topology import load_topology
from kernbench.topology.build import build_topology

SMALL = load_topology("small")
LIMITS = limits_for(SMALL)


# --------------------------------------------------------------------------- one class


class VeExpTile(VeVectorTile):
    """out = exp(in), on rows x length elements: a new VE opcode, defined here only."""

    cost_op: ClassVar[str] = "exp"
    math_op: ClassVar[str] = "exp"
    opcode: Literal["VE_EXP_TILE"] = "VE_EXP_TILE"
    scale_hint: float = Field(1.0, description="an extra payload field, to show one")


ROWS, LENGTH = 4, 96
EXP = {"opcode": "VE_EXP_TILE", "in_bank": 0, "in_offset": 0, "out_bank": 1,
       "out_offset": 256, "rows": ROWS, "length": LENGTH, "qbits_activation": 32}


def _exp_program(**fields: Any) -> dict[str, Any]:
    return {"cmdq": [{**EXP, "id": 0, **fields}, {"opcode": "END", "id": 1}]}


def test_a_new_opcode_is_one_class() -> None:
    with pytest.raises(InputError, match="unknown opcode"):
        parse_program(_exp_program())
    with registered(VeExpTile):
        prog = parse_program(_exp_program(), file="exp.json")  # the tagged union knows it
        assert isinstance(prog.cmdq[0], VeExpTile)
        assert CmdqProgram.model_validate_json(
            CmdqProgram.model_validate(_exp_program()).model_dump_json()).cmdq[0] == prog.cmdq[0]
        assert validate_program(prog, LIMITS, "exp.json") == []
        # the base class's rules apply to it: engine range, TCM bounds
        bad = validate_document(_exp_program(ve_id=1, out_offset=LIMITS.tcm_bank_bytes),
                                LIMITS, "exp.json")
        assert [(e.where, e.field) for e in bad] == [("entry 0", "ve_id"),
                                                      ("entry 0", "out_offset")]
        _check_timing(prog)
        _check_data(prog)
    with pytest.raises(InputError, match="unknown opcode"):  # and it is gone again
        parse_program(_exp_program())


def _check_timing(prog: CmdqProgram) -> None:
    """Doubling pe_math's cost of 'exp' lengthens the entry by exactly the closed-form
    compute time: ceil(rows*length/lanes) * Δcycles / clock."""
    def duration(cycles: float) -> float:
        cfg = SMALL.config.model_copy(deep=True)
        cfg.cube.pe_template.pe_math.op_cycles["exp"] = cycles
        row = simulate_program(prog, build_topology(cfg)).stats()["entries"]["0"]
        assert row["engine"] == "sip0.cube0.pe0.pe_math"
        return row["end_ns"] - row["start_ns"]

    pm = SMALL.config.cube.pe_template.pe_math
    want = math.ceil(ROWS * LENGTH / pm.lanes) * 4.0 / pm.clock_ghz
    assert duration(8.0) - duration(4.0) == pytest.approx(want, abs=1e-6)


def _check_data(prog: CmdqProgram) -> None:
    """The data pass computes exp on the TCM data the program names."""
    x = np.random.default_rng(0).standard_normal((ROWS, LENGTH)).astype(np.float32)
    store = MemoryStore.for_topology(SMALL)
    space = f"tcm:{SMALL.pes[0].id}"
    store.write(space, 0, x)
    init = store.snapshot()
    log = OpLogger()
    simulate_program(prog, SMALL, op_logger=log, data=TcmData())
    final = DataExecutor(log, init).run()
    out = final.read(space, LIMITS.tcm_bank_bytes + 256, (ROWS, LENGTH), "float32")
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


def test_an_incomplete_class_is_refused() -> None:
    class NoCost(VeVectorTile):
        math_op: ClassVar[str] = "exp"
        opcode: Literal["VE_NOCOST_TILE"] = "VE_NOCOST_TILE"

    with pytest.raises(TypeError, match="cost_op"):
        register_opcode(NoCost)
    assert "VE_NOCOST_TILE" not in MODEL_BY_OPCODE
    with pytest.raises(TypeError, match="already"):
        class Twin(VeExpTile):
            opcode: Literal["VE_GELU_TILE"] = "VE_GELU_TILE"  # type: ignore[assignment]

        register_opcode(Twin)


# --------------------------------------------------------------------------- completeness


@pytest.mark.parametrize("opcode", list(MODEL_BY_OPCODE))
def test_every_opcode_carries_all_its_facts(opcode: str) -> None:
    cls = MODEL_BY_OPCODE[opcode]
    assert missing_facts(cls) == []
    assert cls.engine in ENGINES and cls.timing in TIMINGS
    if cls.timing == "math" and "cost_ops" not in cls.__dict__:
        # priced by a pe_math cost the presets have (a fused chain: by its steps')
        assert cls.cost_op in DEFAULT_MATH_OP_CYCLES
        assert cls.math_op
    assert callable(cls.data) or cls.data == NO_DATA
    assert (cls.data == NO_DATA) == (cls.timing == "control")
    assert callable(cls.rules) and callable(cls.check_hbm)
    assert cls.since in ("1.0", "1.1")


@pytest.mark.parametrize("opcode", [o for o, c in MODEL_BY_OPCODE.items() if c.math_op])
def test_data_semantics_name_a_data_pass_op_or_refuse(opcode: str) -> None:
    """An opcode whose data-pass op is missing is refused in one line, never a no-op."""
    entry = _sample(MODEL_BY_OPCODE[opcode], random.Random(1), perturb=False)
    prog = parse_program({"cmdq": [{**entry, "id": 0}, {"opcode": "END", "id": 1}]})
    op = prog.cmdq[0].math_op
    if op in MATH_OPS or op == "ir_layer":
        return
    with pytest.raises(InputError, match=f"data-pass op '{op}'"):
        simulate_program(prog, SMALL, op_logger=OpLogger(), data=TcmData())


# --------------------------------------------------------------------------- agreement


def test_unknown_layer_op_cost_is_refused_by_validate() -> None:
    doc = {"cmdq": [{"opcode": "VE_LAYER_OP", "id": 0, "layer_id": "l", "in_bytes": 64,
                     "out_bytes": 64, "elements": 16, "op": "bogus"},
                    {"opcode": "END", "id": 1}]}
    (err,) = validate_document(doc, LIMITS, "p.json")
    assert (err.where, err.field) == ("entry 0", "op")
    assert "'bogus'" in str(err) and "\n" not in str(err)
    with pytest.raises(InputError, match="field 'op'"):
        simulate_program(parse_program(doc), SMALL)


def test_a_cost_op_missing_from_the_topology_is_refused() -> None:
    cfg = SMALL.config.model_copy(deep=True)
    del cfg.cube.pe_template.pe_math.op_cycles["gelu"]
    topo = build_topology(cfg)
    doc = {"cmdq": [{"opcode": "VE_GELU_TILE", "id": 0, "in_bank": 0, "in_offset": 0,
                     "out_bank": 1, "out_offset": 0, "length": 64, "qbits_activation": 16},
                    {"opcode": "END", "id": 1}]}
    (err,) = validate_document(doc, limits_for(topo), "p.json")
    assert (err.field, "'gelu'" in err.reason) == ("opcode", True)
    with pytest.raises(InputError, match="gelu"):
        simulate_program(parse_program(doc), topo)


def _value(name: str, annotation: Any, rng: random.Random, perturb: bool) -> Any:
    """A value for a field: a plain valid one, or (perturb) one that may break a rule."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    args = get_args(annotation)
    if type(None) in args:  # optional: a value of its type
        return _value(name, next(a for a in args if a is not type(None)), rng, perturb)
    if get_origin(annotation) is Literal:
        return rng.choice(args) if perturb else args[-1 if name.endswith("qbits") else 0]
    if annotation is bool:
        return perturb and rng.random() < 0.5
    if get_origin(annotation) is list and get_args(annotation)[0] is not int \
            and get_origin(get_args(annotation)[0]) is dict:
        # a list of entries (VE_FUSED_TILE's steps): vector entries of the sampled kind,
        # each in place on bank 0 (a chain whose step i reads what step i - 1 wrote)
        step = {k: v for k, v in _sample(MODEL_BY_OPCODE["VE_GELU_TILE"], rng, perturb).items()
                if k != "ve_id"}
        return [dict(step, in_bank=0, in_offset=0, out_bank=0, out_offset=0)
                for _ in range(2)]
    if get_origin(annotation) is list:  # a tile shape
        return rng.choice([[2, 4], [1, 4], [4]]) if perturb else [2, 4]
    if annotation is float or float in args:
        return 0.5
    if annotation is str or str in args:
        return rng.choice(["copy", "gelu", "bogus"]) if name == "op" else "layer"
    if name.endswith("_bank"):
        return rng.randrange(0, LIMITS.tcm_banks + 2) if perturb else 0
    if name.endswith("_offset"):
        return rng.choice([0, 64, LIMITS.tcm_bank_bytes - 8]) if perturb else 0
    if name in ("te_id", "ve_id"):
        return rng.choice([0, 0, 1]) if perturb else 0
    if annotation is int:
        return rng.choice([1, 2, 3, 4, 8, 64]) if perturb else 2
    raise AssertionError(f"no sample value for {name}: {annotation}")


def _sample(cls: type[Opcode], rng: random.Random, perturb: bool) -> dict[str, Any]:
    """One entry of ``cls`` from its field annotations alone (no per-opcode table)."""
    out: dict[str, Any] = {"opcode": cls.model_fields["opcode"].default}
    for name, info in cls.model_fields.items():
        if name in ("opcode", "id", "pe", "deps_before", "deps_after", "debug", "wait_for"):
            continue
        if info.is_required() or (perturb and rng.random() < 0.3):
            out[name] = _value(name, info.annotation, rng, perturb)
    if "qbits" in out:  # DMA: a byte-aligned tile at any width
        out["num_elements"] = 64 * out.get("rows", 1)
    return out


@pytest.mark.parametrize("opcode", list(MODEL_BY_OPCODE))
def test_validate_and_simulate_agree(opcode: str) -> None:
    """Whatever validate accepts, simulate runs to the end; whatever it refuses, simulate
    refuses with the same first line (it validates first): never a crash in between."""
    rng = random.Random(opcode)
    cls = MODEL_BY_OPCODE[opcode]
    if cls.timing == "control":
        return  # nothing for the hardware to rely on
    for k in range(6):
        entry = _sample(cls, rng, perturb=k > 0)
        doc = {"cmdq": [{**entry, "id": 0}, {"opcode": "END", "id": 1}]}
        errors = validate_document(copy.deepcopy(doc), LIMITS, "p.json")
        try:
            prog = parse_program(doc, file="p.json")
        except InputError as exc:
            assert errors and str(errors[0]) == str(exc)
            continue
        if errors:
            with pytest.raises(InputError) as info:
                simulate_program(prog, SMALL, file="p.json")
            assert str(info.value) == str(errors[0])
        else:
            run = simulate_program(prog, SMALL, file="p.json")
            assert run.total_ns > 0, entry
