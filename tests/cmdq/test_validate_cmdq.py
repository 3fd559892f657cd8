"""Whole-program validation (kernbench.cmdq.validate): one row per kind of problem."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kernbench.cmdq.io import load_program, parse_program
from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.schema import DmaLoadTile, End
from kernbench.cmdq.validate import (
    check_program,
    validate_document,
    validate_file,
    validate_program,
)
from kernbench.errors import InputError

SPEC_EXAMPLE = Path(__file__).resolve().parent / "data" / "spec_example.json"
LIMITS = CmdqLimits.default_small()
GIB = 1 << 30
BANK = LIMITS.tcm_bank_bytes
OFM_OVER = BANK - 65535  # the 64x256 fp32 GEMM ofm (65536 bytes) ends one byte past its bank

# The spec §15 example: 0 load act (bank 0), 1 load wgt (bank 1), 2 GEMM 64x256x256 -> bank 2,
# 3 LayerNorm bank 2 -> 3, 4 store bank 3, 5 END.
BASE: dict = json.loads(SPEC_EXAMPLE.read_text(encoding="utf-8"))

Mutation = Callable[[dict], None]


def setf(index: int, **fields: object) -> Mutation:
    def apply(doc: dict) -> None:
        doc["cmdq"][index].update(fields)
    return apply


def delf(index: int, field: str) -> Mutation:
    def apply(doc: dict) -> None:
        del doc["cmdq"][index][field]
    return apply


def insert_barrier(wait_for: list[int]) -> Mutation:
    def apply(doc: dict) -> None:
        doc["cmdq"].insert(5, {"opcode": "BARRIER", "id": 5, "wait_for": wait_for})
        doc["cmdq"][6]["id"] = 6
    return apply


def replace(index: int, entry: dict) -> Mutation:
    def apply(doc: dict) -> None:
        doc["cmdq"][index] = entry
    return apply


def pop_end(doc: dict) -> None:
    doc["cmdq"].pop()


def empty(doc: dict) -> None:
    doc["cmdq"] = []


def version_2(doc: dict) -> None:
    doc["metadata"] = {"version": "2.0"}


CONV = {"opcode": "TE_CONV_TILE", "id": 2, "ifm_bank": 0, "ifm_offset": 0, "wgt_bank": 1,
        "wgt_offset": 0, "ofm_bank": 2, "ofm_offset": 0, "h": 4, "w": 8, "c_in": 4,
        "c_out": 4, "kh": 7, "kw": 3, "qbits_weight": 8, "qbits_activation": 8,
        "deps_before": [0, 1]}
ADD = {"opcode": "VE_ADD_TILE", "id": 3, "in_bank": 2, "in_offset": 0, "in2_bank": 4,
       "in2_offset": 0, "out_bank": 3, "out_offset": 0, "length": 64, "rows": 4,
       "in2_rows": 2, "qbits_activation": 8, "deps_before": [2]}
ROPE = {"opcode": "VE_ROPE_TILE", "id": 3, "in_bank": 2, "in_offset": 0, "out_bank": 3,
        "out_offset": 0, "length": 96, "head_dim": 64, "qbits_activation": 16,
        "deps_before": [2]}

# (name, mutation, expected (where, field) of every problem, in order)
CASES: list[tuple[str, Mutation, list[tuple[str | None, str | None]]]] = [
    ("unknown opcode", setf(2, opcode="TE_MATMUL_TILE"), [("entry 2", "opcode")]),
    ("missing opcode", delf(3, "opcode"), [("entry 3", "opcode")]),
    ("duplicate id", setf(5, id=4), [("entry 4", "id")]),
    ("id out of order", setf(5, id=7), [("entry 7", "id")]),
    ("id not an integer", setf(1, id="1"), [("entry at index 1", "id")]),
    ("deps_before missing id", setf(3, deps_before=[2, 9]), [("entry 3", "deps_before")]),
    ("deps_before itself", setf(3, deps_before=[3]), [("entry 3", "deps_before")]),
    ("deps_before later id (cycle)", setf(2, deps_before=[0, 1, 4]),
     [("entry 2", "deps_before")]),
    ("deps_after earlier id (cycle)", setf(3, deps_after=[1]), [("entry 3", "deps_after")]),
    ("deps_after missing id", setf(3, deps_after=[6]), [("entry 3", "deps_after")]),
    ("wait_for later id", insert_barrier([2, 6]), [("entry 5", "wait_for")]),
    ("wait_for missing id", insert_barrier([42]), [("entry 5", "wait_for")]),
    ("wait_for itself", insert_barrier([5]), [("entry 5", "wait_for")]),
    ("negative dep", setf(3, deps_before=[-1]), [("entry 3", "deps_before")]),
    ("te_id out of range", setf(2, te_id=1), [("entry 2", "te_id")]),
    ("ve_id out of range", setf(3, ve_id=2), [("entry 3", "ve_id")]),
    ("pe index out of range", setf(0, pe=4), [("entry 0", "pe")]),
    ("pe path unknown", setf(1, pe="sip0.cube1.pe0"), [("entry 1", "pe")]),
    ("pe not index or path", setf(1, pe="pe 3!"), [("entry 1", "pe")]),
    ("qbits not allowed", setf(0, qbits=3), [("entry 0", "qbits")]),
    ("qbits_weight not allowed", setf(2, qbits_weight=6), [("entry 2", "qbits_weight")]),
    ("qbits_activation not allowed", setf(3, qbits_activation=12),
     [("entry 3", "qbits_activation")]),
    ("ofm_qbits not allowed", setf(2, ofm_qbits=24), [("entry 2", "ofm_qbits")]),
    ("qbits_kv on a non-kv DMA", setf(0, qbits_kv=8), [("entry 0", "qbits_kv")]),
    ("qbits_kv differs from qbits", setf(0, tensor_role="kv", qbits_kv=4),
     [("entry 0", "qbits_kv")]),
    ("qbits_kv not allowed", setf(0, tensor_role="kv", qbits_kv=3), [("entry 0", "qbits_kv")]),
    ("negative dram_addr", setf(1, dram_addr=-4096), [("entry 1", "dram_addr")]),
    ("negative offset", setf(3, out_offset=-1), [("entry 3", "out_offset")]),
    ("zero num_elements", setf(0, num_elements=0), [("entry 0", "num_elements")]),
    ("negative eps", setf(3, eps=-1e-5), [("entry 3", "eps")]),
    ("wrong type", setf(2, m="64"), [("entry 2", "m")]),
    ("missing required field", delf(2, "k"), [("entry 2", "k")]),
    ("DMA bank beyond TCM", setf(1, spm_bank=8), [("entry 1", "spm_bank")]),
    ("DMA range beyond bank", setf(0, spm_offset=BANK - 4095),
     [("entry 0", "spm_offset")]),
    ("GEMM ofm (32-bit) beyond bank", setf(2, ofm_offset=OFM_OVER),
     [("entry 2", "ofm_offset")]),
    ("GEMM wgt bank beyond TCM", setf(2, wgt_bank=9), [("entry 2", "wgt_bank")]),
    ("VE out range beyond bank", setf(3, rows=300, out_offset=BANK - 100),
     [("entry 3", "out_offset")]),
    ("DMA beyond HBM", setf(4, dram_addr=16 * GIB - 4095), [("entry 4", "dram_addr")]),
    ("strided DMA beyond HBM", setf(0, stride_bytes=GIB, rows=32), [("entry 0", "dram_addr")]),
    ("strided rows overlap", setf(0, stride_bytes=100, rows=16), [("entry 0", "stride_bytes")]),
    ("strided rows uneven", setf(0, stride_bytes=4096, rows=3), [("entry 0", "rows")]),
    ("half-byte rows", setf(1, stride_bytes=4096, rows=16384), [("entry 1", "rows")]),
    ("bias bank without offset", setf(2, bias_bank=4), [("entry 2", "bias_offset")]),
    ("conv kernel larger than input", replace(2, CONV), [("entry 2", "kh")]),
    ("add in2_rows neither 1 nor rows", replace(3, ADD), [("entry 3", "in2_rows")]),
    ("rope head_dim does not divide length", replace(3, ROPE), [("entry 3", "head_dim")]),
    ("END missing", pop_end, [("entry 4", "opcode")]),
    ("END not last", replace(4, {"opcode": "END", "id": 4}), [("entry 4", "opcode")]),
    ("empty program", empty, [(None, "cmdq")]),
    ("unsupported version", version_2, [("metadata", "version")]),
    ("entry not an object", replace(3, [1, 2]), [("entry at index 3", None)]),
]


@pytest.mark.parametrize(("name", "mutate", "expected"), CASES, ids=[c[0] for c in CASES])
def test_malformed_program(
    name: str, mutate: Mutation, expected: list[tuple[str | None, str | None]]
) -> None:
    doc = copy.deepcopy(BASE)
    mutate(doc)
    errors = validate_document(doc, LIMITS, "prog.json")
    assert [(e.where, e.field) for e in errors] == expected, [str(e) for e in errors]
    for err in errors:
        line = str(err)
        assert "\n" not in line
        assert line.startswith("prog.json: ")
        if err.where:
            assert f"{err.where}: " in line
        if err.field:
            assert f"field '{err.field}': " in line
        assert line.endswith(err.reason)
    # the raising forms agree with the collecting form on the first problem
    with pytest.raises(InputError) as info:
        check_program(parse_program(doc, file="prog.json"), LIMITS, "prog.json")
    assert (info.value.where, info.value.field) == expected[0]


def test_case_table_is_broad() -> None:
    assert len(CASES) >= 15


def test_messages_read_well() -> None:
    def first(mutate: Mutation) -> str:
        doc = copy.deepcopy(BASE)
        mutate(doc)
        return str(validate_document(doc, LIMITS, "p.json")[0])

    assert first(setf(0, qbits=3)) == (
        "p.json: entry 0: field 'qbits': must be one of 2, 4, 8, 16, 32, got 3")
    assert first(setf(2, ofm_offset=OFM_OVER)) == (
        "p.json: entry 2: field 'ofm_offset': ofm range of 65536 bytes (16384 elements at "
        f"32 bits) at offset {OFM_OVER} ends at byte {BANK + 1}, beyond the {BANK}-byte bank 2")
    assert first(setf(2, deps_before=[0, 1, 4])) == (
        "p.json: entry 2: field 'deps_before': names entry 4, which comes later: entries may "
        "only wait for earlier entries (this could be a cycle)")
    assert first(setf(2, te_id=1)) == (
        "p.json: entry 2: field 'te_id': te_id 1 is out of range: each PE has 1 tensor engine "
        "(0..0)")
    assert first(setf(1, pe="sip0.cube1.pe0")).startswith(
        "p.json: entry 1: field 'pe': no PE named 'sip0.cube1.pe0' in this topology")


def test_ofm_qbits_changes_the_byte_count() -> None:
    doc = copy.deepcopy(BASE)
    doc["cmdq"][2]["ofm_offset"] = BANK - 2 * 65536 + 1  # 64x256 at 32 bits fits here ...
    assert validate_document(doc, LIMITS) == []
    doc["cmdq"][2]["ofm_qbits"] = 64  # ... an int64 accumulator (ADR-0800) ends 1 B past
    errs = validate_document(doc, LIMITS)
    assert len(errs) == 1 and f"ends at byte {BANK + 1}" in str(errs[0])
    doc["cmdq"][2]["ofm_offset"] = BANK - 2 * 65536
    assert validate_document(doc, LIMITS) == []


@pytest.mark.parametrize("bits", [2, 4, 8, 16])
def test_te_ofm_narrower_than_its_accumulator_refused(bits: int) -> None:
    """The data pass writes the int32 / fp32 accumulator: a narrower declared ofm was
    checked at its width and written at 32 bits, past the checked range (ADR-0801)."""
    doc = copy.deepcopy(BASE)
    doc["cmdq"][2]["ofm_qbits"] = bits
    errs = validate_document(doc, LIMITS, "p.json")
    assert [(e.where, e.field) for e in errs] == [("entry 2", "ofm_qbits")]
    assert f"{bits}-bit output: a TE tile writes its int32 accumulator" in str(errs[0])


def test_te_int16_operands_need_the_int64_accumulator() -> None:
    doc = copy.deepcopy(BASE)
    doc["cmdq"][2].update(qbits_weight=16, qbits_activation=16, int16=True)
    errs = validate_document(doc, LIMITS, "p.json")
    assert [e.field for e in errs] == ["ofm_qbits"] and "must be 64" in str(errs[0])
    doc["cmdq"][2]["ofm_qbits"] = 64
    doc["cmdq"][3]["qbits_activation"] = 32  # (the LayerNorm reading bank 2 stays valid)
    assert [e.field for e in validate_document(doc, LIMITS, "p.json")
            if e.where == "entry 2"] == []


def test_collects_all_problems_and_caps() -> None:
    doc = copy.deepcopy(BASE)
    doc["cmdq"][0]["pe"] = 7
    doc["cmdq"][2]["te_id"] = 3
    doc["cmdq"][3]["deps_before"] = [3]
    doc["cmdq"].pop()
    errors = validate_document(doc, LIMITS, "p.json")
    assert [(e.where, e.field) for e in errors] == [
        ("entry 0", "pe"), ("entry 2", "te_id"), ("entry 3", "deps_before"),
        ("entry 4", "opcode"),
    ]
    assert len(validate_document(doc, LIMITS, "p.json", max_errors=2)) == 2


def test_validate_file(tmp_path: Path) -> None:
    assert validate_file(SPEC_EXAMPLE, LIMITS) == []
    bad = tmp_path / "bad.json"
    bad.write_text('{"cmdq": [', encoding="utf-8")
    (err,) = validate_file(bad, LIMITS)
    assert str(err).startswith(f"{bad}: malformed JSON: ")
    with pytest.raises(InputError, match="malformed JSON"):
        load_program(bad)


def test_checks_models_built_without_validation() -> None:
    prog = load_program(SPEC_EXAMPLE)
    prog.cmdq[0] = DmaLoadTile.model_construct(
        opcode="DMA_LOAD_TILE", id=0, layer_id=None, pe=None, deps_before=[], deps_after=[],
        debug=None, tensor_role="activation", qbits=5, dram_addr=-1, spm_bank=0, spm_offset=0,
        num_elements=16, stride_bytes=None, rows=1,
    )
    errors = validate_program(prog, LIMITS, "p.json")
    assert [(e.where, e.field) for e in errors] == [("entry 0", "qbits"),
                                                    ("entry 0", "dram_addr")]


def test_limits_topology() -> None:
    limits = CmdqLimits(num_pes=2, pe_paths=("sip0.cube0.pe0", "sip0.cube1.pe0"), te_per_pe=2,
                        ve_per_pe=4, tcm_banks=4, tcm_bank_bytes=64 * 1024, hbm_bytes=GIB)
    assert limits.tcm_bytes == 256 * 1024
    assert limits.pe_index("sip0.cube1.pe0") == 1
    assert limits.pe_index("cube1.pe0") == 1
    with pytest.raises(ValueError, match="no PE named 'pe0'"):
        limits.pe_index("pe0")  # ambiguous suffix
    doc = copy.deepcopy(BASE)
    doc["cmdq"][2].update(te_id=1, pe="cube1.pe0")
    doc["cmdq"][3].update(ve_id=3, pe=1)
    assert validate_document(doc, limits) == []  # the 64 KiB GEMM ofm fills bank 2 exactly
    doc["cmdq"][3]["out_bank"] = 4  # only 4 banks here
    assert [(e.where, e.field) for e in validate_document(doc, limits)] == [
        ("entry 3", "out_bank")]
    with pytest.raises(ValueError, match="pe_paths has 1 paths but num_pes is 2"):
        CmdqLimits(num_pes=2, pe_paths=("a",), te_per_pe=1, ve_per_pe=1, tcm_banks=1,
                   tcm_bank_bytes=1, hbm_bytes=1)
    with pytest.raises(ValueError, match="tcm_banks must be a positive integer"):
        CmdqLimits(num_pes=1, pe_paths=("a",), te_per_pe=1, ve_per_pe=1, tcm_banks=0,
                   tcm_bank_bytes=1, hbm_bytes=1)


def test_end_only_program_is_valid() -> None:
    prog = parse_program({"cmdq": [{"opcode": "END", "id": 0}]})
    assert isinstance(prog.cmdq[0], End)
    assert validate_program(prog, LIMITS) == []


def test_kv_dma_with_its_kv_width_is_valid() -> None:
    """Spec §11: a KV tile is tensor_role "kv" + qbits_kv; given equal to qbits, it is a
    declared field (not an ignored extra) and the byte count is num_elements × qbits."""
    doc = copy.deepcopy(BASE)
    doc["cmdq"][0].update(tensor_role="kv", qbits_kv=8)
    prog = parse_program(doc)
    assert validate_program(prog, LIMITS) == []
    e = prog.cmdq[0]
    assert e.qbits_kv == 8 and not (e.model_extra or {}) and e.nbytes == 4096
