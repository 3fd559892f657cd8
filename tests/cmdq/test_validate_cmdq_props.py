"""Property tests: random valid CMDQ DAG programs always parse, validate and round-trip."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernbench.cmdq.io import dumps_program, parse_program
from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.schema import (
    QBITS_ALLOWED,
    entry_dram_range,
    entry_tcm_ranges,
    program_predecessors,
)
from kernbench.cmdq.validate import validate_document, validate_program

LIMITS = (
    CmdqLimits.default_small(),
    CmdqLimits(num_pes=8, pe_paths=tuple(f"sip0.cube{c}.pe{p}" for c in range(2) for p in range(4)),
               te_per_pe=2, ve_per_pe=3, tcm_banks=16, tcm_bank_bytes=64 * 1024,
               hbm_bytes=1 << 32),
)
MAX_OPERAND = 64 * 64 * 8  # every generated TCM operand fits: at most a 64 × 64 int64 output
MAX_DRAM_SPAN = 1 << 20  # and every HBM range in this many

QBITS = st.sampled_from(QBITS_ALLOWED)
Draw = Any


def _subset(draw: Draw, ids: range, max_size: int = 3) -> list[int]:
    if not ids:
        return []
    return sorted(draw(st.sets(st.sampled_from(ids), max_size=max_size)))


def _pe(draw: Draw, limits: CmdqLimits) -> object:
    path = st.sampled_from(limits.pe_paths)
    return draw(st.one_of(
        st.none(),
        st.integers(0, limits.num_pes - 1),
        path,
        path.map(lambda p: p.split(".", 1)[1]),  # "cube0.pe3": unique in both topologies
    ))


def _tcm(draw: Draw, limits: CmdqLimits, *roles: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for role in roles:
        out[f"{role}_bank"] = draw(st.integers(0, limits.tcm_banks - 1))
        out[f"{role}_offset"] = draw(st.integers(0, limits.tcm_bank_bytes - MAX_OPERAND))
    return out


def _dma(draw: Draw, limits: CmdqLimits) -> dict[str, Any]:
    qbits = draw(QBITS)
    rows = draw(st.integers(2, 8))  # a stride needs rows > 1 (ADR-0204)
    strided = draw(st.booleans())
    e: dict[str, Any] = {
        "opcode": draw(st.sampled_from(["DMA_LOAD_TILE", "DMA_STORE_TILE"])),
        "tensor_role": draw(st.sampled_from(["weight", "activation", "kv"])),
        "qbits": qbits,
        "dram_addr": draw(st.integers(0, limits.hbm_bytes - MAX_DRAM_SPAN)),
        "spm_bank": draw(st.integers(0, limits.tcm_banks - 1)),
        "spm_offset": draw(st.integers(0, limits.tcm_bank_bytes - MAX_OPERAND)),
    }
    if strided:
        row_elements = 4 * draw(st.integers(1, 64))  # whole bytes even at 2 bits
        row_bytes = row_elements * qbits // 8
        e.update(num_elements=rows * row_elements, rows=rows,
                 stride_bytes=row_bytes + draw(st.integers(0, 4096)))
    else:
        e.update(num_elements=draw(st.integers(1, 2048)),
                 stride_bytes=draw(st.sampled_from([None, 0])))
    return e


def _te(draw: Draw, limits: CmdqLimits) -> dict[str, Any]:
    e: dict[str, Any] = {
        "te_id": draw(st.integers(0, limits.te_per_pe - 1)),
        **_tcm(draw, limits, "ifm", "wgt", "ofm"),
        "qbits_weight": draw(QBITS),
        "qbits_activation": draw(QBITS),
        "accumulate": draw(st.booleans()),
    }
    if draw(st.booleans()):
        # the accumulator's width: 32, or 64 with integer operands (an int64 accumulator)
        integer = e["qbits_weight"] <= 8 and e["qbits_activation"] <= 8
        e["ofm_qbits"] = draw(st.sampled_from([32, 64] if integer else [32]))
    if draw(st.booleans()):
        e.update(_tcm(draw, limits, "bias"))
    if draw(st.booleans()):
        e.update(opcode="TE_GEMM_TILE", m=draw(st.integers(1, 64)), n=draw(st.integers(1, 64)),
                 k=draw(st.integers(1, 64)))
    else:
        padding = draw(st.integers(0, 1))
        h, w = draw(st.integers(1, 8)), draw(st.integers(1, 8))
        e.update(opcode="TE_CONV_TILE", n=draw(st.integers(1, 2)), h=h, w=w,
                 c_in=draw(st.integers(1, 16)), c_out=draw(st.integers(1, 16)),
                 kh=draw(st.integers(1, min(3, h + 2 * padding))),
                 kw=draw(st.integers(1, min(3, w + 2 * padding))),
                 stride=draw(st.integers(1, 2)), padding=padding)
    return e


VECTOR_OPS = ["VE_LAYERNORM_TILE", "VE_SOFTMAX_TILE", "VE_RMSNORM_TILE", "VE_GELU_TILE",
              "VE_SILU_TILE", "VE_ADD_TILE", "VE_MUL_TILE", "VE_ROPE_TILE", "VE_COPY_TILE",
              "VE_QUANTIZE_TILE", "VE_REQUANTIZE_TILE", "VE_TRANSPOSE_TILE"]


def _ve(draw: Draw, limits: CmdqLimits) -> dict[str, Any]:
    op = draw(st.sampled_from(VECTOR_OPS))
    rows = draw(st.integers(1, 8))
    e: dict[str, Any] = {
        "opcode": op,
        "ve_id": draw(st.integers(0, limits.ve_per_pe - 1)),
        **_tcm(draw, limits, "in", "out"),
        "rows": rows,
        "qbits_activation": draw(QBITS),
    }
    if op == "VE_TRANSPOSE_TILE":
        e.update(rows=draw(st.integers(1, 64)), cols=draw(st.integers(1, 64)))
    elif op == "VE_ROPE_TILE":
        head_dim = 2 * draw(st.integers(1, 32))
        e.update(length=head_dim * draw(st.integers(1, 4)), head_dim=head_dim,
                 style=draw(st.sampled_from(["half", "interleaved"])))
        if draw(st.booleans()):
            e.update(_tcm(draw, limits, "cos", "sin"))
    else:
        e["length"] = draw(st.integers(1, 512))
    if op in ("VE_QUANTIZE_TILE", "VE_REQUANTIZE_TILE"):
        e.update(out_qbits=draw(QBITS), scale=draw(st.floats(1e-6, 1e3)),
                 zero_point=draw(st.integers(-128, 127)))
    elif draw(st.booleans()):
        e["out_qbits"] = draw(QBITS)
    if op in ("VE_ADD_TILE", "VE_MUL_TILE"):
        e.update(_tcm(draw, limits, "in2"))
        e["in2_rows"] = draw(st.sampled_from([None, 1, rows]))
    if op in ("VE_LAYERNORM_TILE", "VE_RMSNORM_TILE"):
        e["eps"] = draw(st.floats(0, 1e-2))
        if draw(st.booleans()):
            e.update(_tcm(draw, limits, "gamma"))
        if op == "VE_LAYERNORM_TILE" and draw(st.booleans()):
            e.update(_tcm(draw, limits, "beta"))
    if op == "VE_SOFTMAX_TILE":
        e.update(scale=draw(st.floats(1e-3, 10)),
                 causal_offset=draw(st.one_of(st.none(), st.integers(-64, 64))))
    return e


@st.composite
def programs(draw: Draw) -> tuple[dict[str, Any], CmdqLimits]:
    limits = draw(st.sampled_from(LIMITS))
    n = draw(st.integers(1, 24))  # entries including the final END
    entries = []
    for i in range(n - 1):
        kind = draw(st.sampled_from(["dma", "te", "ve", "barrier", "nop"]))
        if kind == "dma":
            e = _dma(draw, limits)
        elif kind == "te":
            e = _te(draw, limits)
        elif kind == "ve":
            e = _ve(draw, limits)
        elif kind == "barrier":
            e = {"opcode": "BARRIER", "wait_for": _subset(draw, range(i), 5)}
        else:
            e = {"opcode": "NOP"}
        e.update(id=i, deps_before=_subset(draw, range(i)),
                 deps_after=_subset(draw, range(i + 1, n)))
        if draw(st.booleans()):
            e["pe"] = _pe(draw, limits)
        if draw(st.booleans()):
            e["layer_id"] = draw(st.text(max_size=8))
        if draw(st.integers(0, 9)) == 0:
            e["vendor_extra"] = {"x": draw(st.integers())}  # tolerated unknown field
        entries.append({k: v for k, v in e.items() if v is not None})
    entries.append({"opcode": "END", "id": n - 1, "deps_before": _subset(draw, range(n - 1))})
    version = draw(st.sampled_from(["1.0", "1.1"]))
    return {"cmdq": entries, "metadata": {"version": version}}, limits


_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]


@settings(max_examples=60, deadline=None, suppress_health_check=_HEALTH)
@given(programs())
def test_random_valid_programs_validate(case: tuple[dict[str, Any], CmdqLimits]) -> None:
    doc, limits = case
    assert [str(e) for e in validate_document(doc, limits, "gen.json")] == []
    prog = parse_program(doc, file="gen.json")
    assert validate_program(prog, limits) == []
    # round trip through the writer is lossless and stable
    text = dumps_program(prog)
    again = parse_program(json.loads(text))
    assert again == prog
    assert dumps_program(again) == text
    # helpers agree with the limits the program was generated under
    for i, (entry, preds) in enumerate(zip(prog.cmdq, program_predecessors(prog), strict=True)):
        assert all(p < i for p in preds)
        for r in entry_tcm_ranges(entry, limits):
            assert 0 <= r.pe < limits.num_pes
            assert r.end <= limits.tcm_bank_bytes
        dram = entry_dram_range(entry)
        if dram is not None:
            assert dram.end <= limits.hbm_bytes


@settings(max_examples=25, deadline=None, suppress_health_check=_HEALTH)
@given(programs(), st.data())
def test_a_forward_dependency_is_reported(
    case: tuple[dict[str, Any], CmdqLimits], data: st.DataObject
) -> None:
    doc, limits = case
    n = len(doc["cmdq"])
    if n < 2:
        return
    i = data.draw(st.integers(0, n - 2))
    later = data.draw(st.integers(i + 1, n - 1))
    bad = copy.deepcopy(doc)
    bad["cmdq"][i]["deps_before"] = [*bad["cmdq"][i].get("deps_before", []), later]
    errors = validate_document(bad, limits, "gen.json")
    assert [(e.where, e.field) for e in errors] == [(f"entry {i}", "deps_before")]
