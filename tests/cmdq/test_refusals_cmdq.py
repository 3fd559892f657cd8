"""Issue 12, the CMDQ part: refused in one line, or warned about, never silently wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernbench.cli import main
from kernbench.cmdq.hw import limits_for
from kernbench.cmdq.io import parse_program
from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.validate import edit_distance, field_warnings, validate_document
from kernbench.config.load import PRESET_DIR, preset_names
from kernbench.config.schema import PeGemmSpec, PeMathSpec
from kernbench.errors import InputError
from kernbench.host.simulate import simulate_program
from kernbench.topology import load_topology

SMALL = load_topology("small")
LIMITS = CmdqLimits.default_small()
LOAD = {"opcode": "DMA_LOAD_TILE", "qbits": 8, "dram_addr": 0, "spm_bank": 0,
        "spm_offset": 0, "num_elements": 4096}


def _prog(*entries: dict[str, Any]) -> dict[str, Any]:
    cmdq = [{**e, "id": i} for i, e in enumerate(entries)]
    return {"cmdq": [*cmdq, {"opcode": "END", "id": len(cmdq)}]}


# --------------------------------------------------------------------------- stride, rows


@pytest.mark.parametrize(("fields", "ok"), [
    ({"stride_bytes": 8192}, False),  # a stride without rows: refused, not contiguous
    ({"stride_bytes": 8192, "rows": 1}, False),
    ({"stride_bytes": 8192, "rows": 4}, True),
    ({"stride_bytes": 0}, True),  # 0 / null: contiguous, as the spec says
    ({"stride_bytes": None}, True),
])
def test_stride_needs_rows(fields: dict[str, Any], ok: bool) -> None:
    doc = _prog({**LOAD, **fields})
    errors = validate_document(doc, LIMITS, "p.json")
    if ok:
        assert errors == []
        simulate_program(parse_program(doc), SMALL)
        return
    assert [(e.where, e.field) for e in errors] == [("entry 0", "rows")]
    assert "stride_bytes 8192" in errors[0].reason
    with pytest.raises(InputError, match="field 'rows'"):
        simulate_program(parse_program(doc), SMALL)


# --------------------------------------------------------------------------- limits


def _merged(name: str) -> dict[str, Any]:
    """A preset's YAML with its `extends` chain merged (the test's own reader)."""
    raw = yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
    parent = raw.pop("extends", None)
    if parent is None:
        return raw

    def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k),
                                                                            dict) else v
        return out

    return merge(_merged(parent), raw)


@pytest.mark.parametrize("name", preset_names())
def test_limits_equal_the_presets(name: str) -> None:
    y = _merged(name)
    cube, pt = y["cube"], y["cube"]["pe_template"]
    # a `system:` section's chips are the SIPs (docs/topologies.md, "Many chips")
    sips = y["system"]["chips"] if "system" in y else y["sip"]["count"]
    cubes = sips * y["sip"]["cubes"]["rows"] * y["sip"]["cubes"]["cols"]
    tcm = pt["pe_tcm"]
    bank = tcm["capacity_kib"] * 1024 // tcm["banks"]
    got = CmdqLimits.for_topology(load_topology(name))
    assert got.num_pes == cubes * len(cube["pe_layout"])
    assert got.tcm_bank_bytes == bank
    assert got.tcm_banks == (tcm["capacity_kib"] - tcm["reserved_kib"]) * 1024 // bank
    assert got.hbm_bytes == cubes * cube["hbm_ctrl"]["capacity_gib"] << 30
    assert got.te_per_pe == pt["pe_gemm"].get("count", PeGemmSpec.model_fields["count"].default)
    assert got.ve_per_pe == pt["pe_math"].get("count", PeMathSpec.model_fields["count"].default)
    assert got.pe_paths[0] == "sip0.cube0.pe0"


def test_default_small_is_the_small_preset() -> None:
    assert CmdqLimits.default_small() == limits_for(SMALL)
    assert CmdqLimits.default_small().tcm_bytes == 1536 * 1024  # 2048 KiB less 512 reserved


# --------------------------------------------------------------------------- every problem


def test_validate_reports_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    doc = _prog({**LOAD, "qbits": 3},  # parse problem
                {**LOAD, "spm_bank": 99},  # program problem of an entry that parsed
                {**LOAD, "num_elements": "many"},  # parse problem
                {"opcode": "VE_LAYER_OP", "layer_id": "l", "in_bytes": 8, "out_bytes": 8,
                 "elements": 8, "op": "bogus"},  # program problem
                {**LOAD, "deps_before": [9]})  # program problem
    got = [(e.where, e.field) for e in validate_document(doc, LIMITS, "p.json")]
    assert got == [("entry 0", "qbits"), ("entry 2", "num_elements"), ("entry 1", "spm_bank"),
                   ("entry 3", "op"), ("entry 4", "deps_before")]
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc), encoding="utf-8")
    assert main(["validate", str(f)]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 5 and all(ln.startswith(f"error: {f}: entry ") for ln in lines)


def test_partial_programs_do_not_invent_problems() -> None:
    # the END that did not parse is not reported missing; ids still resolve past it
    doc = _prog(LOAD, {**LOAD, "deps_before": [0]})
    doc["cmdq"][-1]["debug"] = "not an object"
    got = [(e.where, e.field) for e in validate_document(doc, LIMITS, "p.json")]
    assert got == [("entry 2", "debug")]


# --------------------------------------------------------------------------- near misses


def test_edit_distance() -> None:
    assert edit_distance("lenght", "length") == 2
    assert edit_distance("rows", "row") == 1
    assert edit_distance("", "abc") == 3
    assert edit_distance("kitten", "sitting") == 3


def test_misspelt_optional_field_is_kept_and_warned(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    gelu = {"opcode": "VE_GELU_TILE", "in_bank": 0, "in_offset": 0, "out_bank": 1,
            "out_offset": 0, "length": 64, "qbits_activation": 16}
    doc = _prog({**gelu, "aproximate": "tanh", "note": "free text"},
                {**LOAD, "tensor_role": "kv", "qbits_kv": LOAD["qbits"], "rowz": 2})
    prog = parse_program(doc)
    assert prog.cmdq[0].model_extra == {"aproximate": "tanh", "note": "free text"}  # kept
    warnings = field_warnings(prog.cmdq, "p.json")
    assert warnings == [
        "p.json: entry 0: field 'aproximate': unknown field kept (spec §14); did you mean "
        "'approximate'?",
        "p.json: entry 1: field 'rowz': unknown field kept (spec §14); did you mean 'rows'?",
    ]
    f = tmp_path / "w.json"
    f.write_text(json.dumps(doc), encoding="utf-8")
    assert main(["validate", str(f)]) == 0
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if ln.startswith("warning: ")] == [
        f"warning: {f}: entry 0: field 'aproximate': unknown field kept (spec §14); did you "
        "mean 'approximate'?",
        f"warning: {f}: entry 1: field 'rowz': unknown field kept (spec §14); did you mean "
        "'rows'?",
    ]


@pytest.mark.parametrize(("fields", "ok"), [
    ({"scale": 0.5}, True),
    ({"scale_bank": 4, "scale_offset": 0}, True),
    ({"row_scale_bank": 4, "row_scale_offset": 0, "scale": 0.5}, True),
    ({}, False),  # no scale at all: the data pass would have nothing to multiply by
    ({"row_scale_bank": 4, "row_scale_offset": 0}, False),
])
def test_dequantize_needs_a_scale(fields: dict[str, Any], ok: bool) -> None:
    deq = {"opcode": "VE_DEQUANTIZE_TILE", "in_bank": 0, "in_offset": 0, "out_bank": 1,
           "out_offset": 0, "length": 64, "rows": 2, "qbits_activation": 32, **fields}
    errors = validate_document(_prog(deq), LIMITS, "p.json")
    assert [(e.where, e.field) for e in errors] == ([] if ok else [("entry 0", "scale")])
