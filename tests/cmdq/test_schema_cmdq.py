"""CMDQ models, JSON Schema, reading and writing (kernbench.cmdq.schema / io)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kernbench.cmdq.io import (
    dump_program,
    dumps_program,
    load_program,
    parse_program,
    parse_program_collect,
    program_to_obj,
)
from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.schema import (
    CMDQ_VERSION,
    MODEL_BY_OPCODE,
    OPCODES,
    OPCODES_1_0,
    CmdqProgram,
    DmaLoadTile,
    End,
    TeGemmTile,
    cmdq_json_schema,
    cmdq_json_schema_text,
    entry_dram_range,
    entry_elements,
    entry_macs,
    entry_pe_index,
    entry_tcm_ranges,
    program_predecessors,
    tile_bytes,
)
from kernbench.cmdq.validate import validate_program
from kernbench.errors import InputError

HERE = Path(__file__).resolve().parent
SPEC_EXAMPLE = HERE / "data" / "spec_example.json"
REPO = HERE.parent.parent
SCHEMA_FILE = REPO / "schemas" / "cmdq.schema.json"

# One valid entry of every opcode (ids are filled in by `program`).
SAMPLES: dict[str, dict] = {
    "DMA_LOAD_TILE": dict(tensor_role="weight", qbits=4, dram_addr=4096, spm_bank=0,
                          spm_offset=0, num_elements=1024),
    "DMA_STORE_TILE": dict(tensor_role="activation", qbits=8, dram_addr=1 << 20, spm_bank=2,
                           spm_offset=64, num_elements=4096, stride_bytes=8192, rows=4),
    "DMA_GATHER_TILE": dict(dram_addr=1 << 20, table_rows=256, row_bytes=256, rows=16,
                            index_dtype="int64", ids_bank=1, ids_offset=0, spm_bank=2,
                            spm_offset=0),
    "DMA_MCAST_TILE": dict(qbits=8, num_elements=2048, spm_bank=1, spm_offset=0,
                           dst_pes=[1, 2], dst_bank=1, dst_offset=0),
    "TE_GEMM_TILE": dict(te_id=0, ifm_bank=0, ifm_offset=0, wgt_bank=1, wgt_offset=0,
                         ofm_bank=2, ofm_offset=0, m=16, n=32, k=64, qbits_weight=4,
                         qbits_activation=8, ofm_qbits=64, accumulate=True, bias_bank=3,
                         bias_offset=0),
    "TE_CONV_TILE": dict(ifm_bank=0, ifm_offset=0, wgt_bank=1, wgt_offset=0, ofm_bank=2,
                         ofm_offset=0, n=1, h=8, w=8, c_in=4, c_out=8, kh=3, kw=3, stride=1,
                         padding=1, qbits_weight=8, qbits_activation=8),
    "VE_LAYERNORM_TILE": dict(ve_id=0, in_bank=2, in_offset=0, out_bank=3, out_offset=0,
                              length=256, rows=4, qbits_activation=8, eps=1e-5, gamma_bank=4,
                              gamma_offset=0, beta_bank=4, beta_offset=1024),
    "VE_SOFTMAX_TILE": dict(in_bank=4, in_offset=0, out_bank=4, out_offset=0, length=128,
                            qbits_activation=16, scale=0.125, causal_offset=-3),
    "VE_RMSNORM_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=64,
                            qbits_activation=16, gamma_bank=5, gamma_offset=0),
    "VE_GELU_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=64,
                         qbits_activation=16, approximate="tanh"),
    "VE_SILU_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=64,
                         rows=2, qbits_activation=16),
    "VE_ADD_TILE": dict(in_bank=2, in_offset=0, in2_bank=5, in2_offset=0, out_bank=3,
                        out_offset=0, length=64, rows=8, in2_rows=1, qbits_activation=16),
    "VE_MUL_TILE": dict(in_bank=2, in_offset=0, in2_bank=5, in2_offset=0, out_bank=3,
                        out_offset=0, length=64, qbits_activation=16, in2_qbits=32),
    "VE_ROPE_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=128,
                         rows=4, head_dim=64, qbits_activation=16, cos_bank=5, cos_offset=0,
                         sin_bank=5, sin_offset=4096),
    "VE_COPY_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=64,
                         qbits_activation=8),
    "VE_TRANSPOSE_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, rows=16,
                              cols=32, qbits_activation=8),
    "VE_QUANTIZE_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=64,
                             qbits_activation=32, out_qbits=8, scale=0.05, zero_point=-3),
    "VE_REQUANTIZE_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=64,
                               qbits_activation=32, out_qbits=8, scale=0.001),
    "VE_DEQUANTIZE_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=64,
                               rows=4, qbits_activation=32, out_qbits=32, scale_bank=5,
                               scale_offset=0, bias_bank=5, bias_offset=256),
    "VE_ROWSCALE_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=64,
                             rows=4, qbits_activation=32, bits=8),
    "VE_QPARAMS_TILE": dict(in_bank=2, in_offset=0, in2_bank=2, in2_offset=64, out_bank=3,
                            out_offset=0, length=16, qbits_activation=32),
    "VE_ZPCORR_TILE": dict(in_bank=2, in_offset=0, out_bank=2, out_offset=0, length=64,
                           qparams_bank=4, qparams_offset=0, zero_point=-128),
    "VE_SOFTMAX_BLOCK_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=64,
                                  rows=4, qbits_activation=32, out_qbits=32, state_bank=4,
                                  state_offset=0, causal_offset=-3),
    "VE_ATTN_MERGE_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=16,
                               rows=4, qbits_activation=32, out_qbits=32, scale=0.01,
                               row_scale_bank=4, row_scale_offset=0, state_bank=4,
                               state_offset=64, last=True),
    "VE_ATTN_COMBINE_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=16,
                                 rows=4, qbits_activation=32, out_qbits=32, part_state_bank=4,
                                 part_state_offset=0, state_bank=4, state_offset=64,
                                 last=True),
    "VE_DWCONV_TILE": dict(in_bank=2, in_offset=0, wgt_bank=4, wgt_offset=0, out_bank=3,
                           out_offset=0, c=8, multiplier=2, h=6, w=5, kh=3, kw=3, stride=2,
                           pad_top=1, pad_bottom=0, padding=1, qbits_activation=8,
                           qbits_weight=8, bias_bank=5, bias_offset=0),
    "VE_POOL_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, c=4, h=7, w=7,
                         kh=3, kw=3, stride=2, padding=1, mode="avg", ceil_mode=True,
                         count_include_pad=True, qbits_activation=32),
    "VE_REDUCE_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, length=49,
                           rows=16, op="mean", qbits_activation=32),
    "VE_CLIP_TILE": dict(in_bank=2, in_offset=0, out_bank=2, out_offset=0, length=64, rows=2,
                         qbits_activation=16, lo=0.0, hi=6.0),
    "VE_ELEMENTWISE_TILE": dict(in_bank=2, in_offset=0, in2_bank=3, in2_offset=0, in3_bank=4,
                                in3_offset=0, out_bank=5, out_offset=0, op="where",
                                out_shape=[16, 16], in_shape=[16, 16], in_dtype="bool",
                                in2_shape=[1, 1], in2_dtype="fp32", in3_shape=[1, 16],
                                in3_dtype="fp32", out_dtype="fp32", cost="where"),
    "VE_CUMSUM_TILE": dict(in_bank=2, in_offset=0, out_bank=3, out_offset=0, rows=4,
                           length=16, out_dtype="int64"),
    "VE_FUSED_TILE": dict(steps=[
        dict(opcode="VE_GELU_TILE", in_bank=2, in_offset=0, out_bank=2, out_offset=0,
             length=64, qbits_activation=32),
        dict(opcode="VE_QUANTIZE_TILE", in_bank=2, in_offset=0, out_bank=3, out_offset=0,
             length=64, qbits_activation=32, out_qbits=8, scale=0.1)]),
    "VE_LAYER_OP": dict(layer_id="embedding_1", in_bytes=4096, out_bytes=4096, dram_addr=0,
                        elements=1024, op="copy"),
    "TE_LAYER_OP": dict(layer_id="conv_3", in_bytes=4096, out_bytes=4096, m=64, n=32, k=27),
    "BARRIER": dict(wait_for=[0, 1]),
    "NOP": dict(),
}


def program(*opcodes: str) -> dict:
    entries = [dict(opcode=op, id=i, **copy.deepcopy(SAMPLES[op])) for i, op in enumerate(opcodes)]
    entries.append(dict(opcode="END", id=len(entries), deps_before=[]))
    return {"cmdq": entries, "metadata": {"version": CMDQ_VERSION}}


def spec_example() -> dict:
    return json.loads(SPEC_EXAMPLE.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- spec example


def test_spec_example_parses_and_validates() -> None:
    prog = load_program(SPEC_EXAMPLE)
    assert [e.opcode for e in prog.cmdq] == [
        "DMA_LOAD_TILE", "DMA_LOAD_TILE", "TE_GEMM_TILE", "VE_LAYERNORM_TILE",
        "DMA_STORE_TILE", "END",
    ]
    assert prog.metadata.version == "1.0"  # no metadata: the oldest version
    assert validate_program(prog, CmdqLimits.default_small(), str(SPEC_EXAMPLE)) == []
    gemm = prog.cmdq[2]
    assert isinstance(gemm, TeGemmTile)
    assert (gemm.m, gemm.n, gemm.k, gemm.ofm_qbits) == (64, 256, 256, 32)
    assert program_predecessors(prog) == [(), (), (0, 1), (2,), (3,), (4,)]


def test_every_opcode_parses_and_validates() -> None:
    doc = program(*SAMPLES)
    prog = parse_program(doc, file="all.json")
    assert [e.opcode for e in prog.cmdq] == [*SAMPLES, "END"]
    assert set(OPCODES) == {*SAMPLES, "END"}
    assert set(OPCODES) >= OPCODES_1_0
    assert validate_program(prog, CmdqLimits.default_small(), "all.json") == []


# --------------------------------------------------------------------------- versions


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.9"])
def test_readable_versions(version: str) -> None:
    doc = spec_example()
    doc["metadata"] = {"version": version, "graph_name": "g"}
    assert parse_program(doc).metadata.version == version


@pytest.mark.parametrize("version", ["2.0", "0.9", "1", "v1.1", "1.x"])
def test_unreadable_versions(version: str) -> None:
    doc = spec_example()
    doc["metadata"] = {"version": version}
    with pytest.raises(InputError) as info:
        parse_program(doc, file="p.json")
    assert info.value.where == "metadata"
    assert info.value.field == "version"
    assert str(info.value).startswith("p.json: metadata: field 'version': unsupported")


def test_metadata_without_version_is_1_0_and_built_programs_are_current() -> None:
    doc = spec_example()
    doc["metadata"] = {"graph_name": "g"}
    assert parse_program(doc).metadata.version == "1.0"
    built = CmdqProgram(cmdq=[End(id=0)])
    assert built.metadata.version == CMDQ_VERSION


def test_1_1_additions_accepted_in_1_0_program() -> None:
    # Additions are optional fields and new opcodes; a reader does not gate them on version.
    doc = program("VE_GELU_TILE")
    doc["metadata"]["version"] = "1.0"
    assert parse_program(doc).cmdq[0].opcode == "VE_GELU_TILE"


# --------------------------------------------------------------------------- extension rules


def test_extra_fields_of_known_opcode_are_kept() -> None:
    doc = spec_example()
    doc["cmdq"][0]["vendor_width"] = 4  # (qbits_kv is declared: ADR-0820)
    doc["cmdq"][0]["vendor_hint"] = {"prefetch": True, "ways": [1, 2]}
    doc["cmdq"][5]["note"] = "bye"
    doc["producer"] = {"tool": "x"}
    prog = parse_program(doc)
    assert prog.cmdq[0].model_extra == {"vendor_width": 4,
                                        "vendor_hint": {"prefetch": True, "ways": [1, 2]}}
    assert prog.model_extra == {"producer": {"tool": "x"}}
    assert validate_program(prog, CmdqLimits.default_small()) == []
    again = parse_program(json.loads(dumps_program(prog)))
    assert again.cmdq[0].model_extra == prog.cmdq[0].model_extra
    assert again.cmdq[5].model_extra == {"note": "bye"}
    assert again.model_extra == {"producer": {"tool": "x"}}


def test_unknown_opcode_rejected() -> None:
    doc = spec_example()
    doc["cmdq"][2]["opcode"] = "TE_GEM_TILE"
    with pytest.raises(InputError) as info:
        parse_program(doc, file="p.json")
    assert str(info.value) == ("p.json: entry 2: field 'opcode': unknown opcode \"TE_GEM_TILE\" "
                               "(did you mean TE_GEMM_TILE?)")
    doc["cmdq"][2]["opcode"] = "FROBNICATE"
    with pytest.raises(InputError, match="unknown opcode \"FROBNICATE\" \\(known: DMA_LOAD"):
        parse_program(doc, file="p.json")


def test_strict_types() -> None:
    for field, value in [("qbits", "8"), ("num_elements", 4096.5), ("spm_bank", True),
                         ("dram_addr", None)]:
        doc = spec_example()
        doc["cmdq"][0][field] = value
        with pytest.raises(InputError) as info:
            parse_program(doc)
        assert (info.value.where, info.value.field) == ("entry 0", field)


def test_collect_reports_every_bad_entry() -> None:
    doc = spec_example()
    doc["cmdq"][0]["qbits"] = 5
    doc["cmdq"][2]["m"] = -1
    doc["cmdq"][3]["opcode"] = "VE_NOPE"
    doc["cmdq"].insert(4, 17)
    prog, errors = parse_program_collect(doc, file="p.json")
    assert prog is None
    assert [(e.where, e.field) for e in errors] == [
        ("entry 0", "qbits"), ("entry 2", "m"), ("entry 3", "opcode"),
        ("entry at index 4", None),
    ]
    _, first = parse_program_collect(doc, file="p.json", max_errors=1)
    assert len(first) == 1


# --------------------------------------------------------------------------- JSON Schema


def test_committed_json_schema_matches_models() -> None:
    expected = cmdq_json_schema_text()
    current = SCHEMA_FILE.read_text(encoding="utf-8") if SCHEMA_FILE.exists() else ""
    assert current == expected, (
        "schemas/cmdq.schema.json is out of date with kernbench.cmdq.schema; regenerate it "
        "with: .venv/bin/python scripts/gen_cmdq_schema.py"
    )


def test_json_schema_covers_every_opcode() -> None:
    schema = cmdq_json_schema()
    mapping = schema["properties"]["cmdq"]["items"]["discriminator"]["mapping"]
    assert set(mapping) == set(OPCODES)
    for opcode, ref in mapping.items():
        definition = schema["$defs"][ref.rsplit("/", 1)[1]]
        assert definition["properties"]["opcode"]["const"] == opcode
        assert definition["required"][0] == "opcode"
        assert definition["additionalProperties"] is True
    gemm = schema["$defs"]["TeGemmTile"]["properties"]
    assert gemm["qbits_weight"]["enum"] == [2, 4, 8, 16, 32]
    assert gemm["m"]["minimum"] == 1


# --------------------------------------------------------------------------- files


def test_malformed_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"cmdq": [ {"opcode": "END", "id": 0}, ]}', encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_program(path)
    assert str(info.value).startswith(f"{path}: malformed JSON: ")
    assert "line 1" in str(info.value)


def test_nan_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "nan.json"
    path.write_text('{"cmdq": [{"opcode": "END", "id": 0, "x": NaN}]}', encoding="utf-8")
    with pytest.raises(InputError, match="malformed JSON: NaN is not valid JSON"):
        load_program(path)


def test_size_cap_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(SPEC_EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(InputError, match="over the 100-byte limit"):
        load_program(path, max_bytes=100)
    with pytest.raises(InputError, match="no such file"):
        load_program(tmp_path / "missing.json")
    with pytest.raises(InputError, match="top level must be a JSON object"):
        parse_program([1, 2])


def test_dump_is_deterministic_and_round_trips(tmp_path: Path) -> None:
    prog = parse_program(program(*SAMPLES))
    text = dumps_program(prog)
    assert text == dumps_program(parse_program(json.loads(text)))
    path = tmp_path / "out.json"
    dump_program(prog, path)
    assert path.read_text(encoding="utf-8") == text
    again = load_program(path)
    assert again == prog
    assert program_to_obj(again) == json.loads(text)
    lines = text.splitlines()
    assert lines[2].startswith('    {"opcode": "DMA_LOAD_TILE", "id": 0, ')  # one entry a line
    assert '"bias_bank": null' not in text and '"pe"' not in text  # unset optionals omitted


def test_models_build_without_opcode() -> None:
    e = DmaLoadTile(id=0, qbits=8, dram_addr=0, spm_bank=0, spm_offset=0, num_elements=8)
    assert e.opcode == "DMA_LOAD_TILE"
    assert MODEL_BY_OPCODE["DMA_LOAD_TILE"] is DmaLoadTile


# --------------------------------------------------------------------------- byte counts


def test_tile_bytes_rounds_up() -> None:
    assert tile_bytes(16384, 4) == 8192
    assert tile_bytes(3, 4) == 2
    assert tile_bytes(5, 2) == 2
    assert tile_bytes(7, 32) == 28


def test_spec_example_byte_counts() -> None:
    prog = load_program(SPEC_EXAMPLE)
    load_w = prog.cmdq[1]
    (spm,) = entry_tcm_ranges(load_w)
    assert (spm.role, spm.bank, spm.offset, spm.nbytes, spm.access) == ("spm", 1, 0, 8192, "w")
    assert entry_dram_range(load_w) == (200000, 1, 8192, 8192, False)
    ifm, wgt, ofm = entry_tcm_ranges(prog.cmdq[2])
    assert (ifm.role, ifm.nbytes, wgt.nbytes, ofm.nbytes) == ("ifm", 64 * 256, 256 * 256 // 2,
                                                             64 * 256 * 4)
    assert (ofm.bank_field, ofm.offset_field, ofm.access) == ("ofm_bank", "ofm_offset", "w")
    assert entry_macs(prog.cmdq[2]) == 64 * 256 * 256
    ln_in, ln_out = entry_tcm_ranges(prog.cmdq[3])
    assert (ln_in.nbytes, ln_out.nbytes) == (256, 256)
    store = entry_dram_range(prog.cmdq[4])
    assert store is not None and store.write and store.end == 300000 + 4096
    assert entry_dram_range(prog.cmdq[2]) is None
    assert entry_tcm_ranges(prog.cmdq[5]) == ()


def test_extension_byte_counts() -> None:
    prog = parse_program(program(*SAMPLES))
    by_op = {e.opcode: e for e in prog.cmdq}
    store = entry_dram_range(by_op["DMA_STORE_TILE"])
    assert store is not None
    assert (store.rows, store.row_bytes, store.stride_bytes) == (4, 1024, 8192)
    assert (store.nbytes, store.end) == (4096, (1 << 20) + 3 * 8192 + 1024)
    gemm = {r.role: r for r in entry_tcm_ranges(by_op["TE_GEMM_TILE"])}
    assert gemm["ofm"].nbytes == 16 * 32 * 8 and gemm["ofm"].access == "rw"  # int64
    assert gemm["bias"].nbytes == 32 * 4
    conv = by_op["TE_CONV_TILE"]
    assert conv.out_hw == (8, 8)
    assert {r.role: r.nbytes for r in entry_tcm_ranges(conv)} == {
        "ifm": 8 * 8 * 4, "wgt": 3 * 3 * 4 * 8, "ofm": 8 * 8 * 8 * 4,
    }
    assert entry_macs(conv) == 8 * 8 * 8 * 3 * 3 * 4
    ln = {r.role: r.nbytes for r in entry_tcm_ranges(by_op["VE_LAYERNORM_TILE"])}
    assert ln == {"in": 1024, "gamma": 1024, "beta": 1024, "out": 1024}
    add = {r.role: r.nbytes for r in entry_tcm_ranges(by_op["VE_ADD_TILE"])}
    assert add == {"in": 8 * 64 * 2, "in2": 64 * 2, "out": 8 * 64 * 2}
    mul = {r.role: r.nbytes for r in entry_tcm_ranges(by_op["VE_MUL_TILE"])}
    assert mul["in2"] == 64 * 4
    rope = {r.role: r.nbytes for r in entry_tcm_ranges(by_op["VE_ROPE_TILE"])}
    assert rope == {"in": 4 * 128 * 2, "cos": 4 * 32 * 4, "sin": 4 * 32 * 4, "out": 4 * 128 * 2}
    quant = {r.role: r.nbytes for r in entry_tcm_ranges(by_op["VE_QUANTIZE_TILE"])}
    assert quant == {"in": 64 * 4, "out": 64}
    tr = by_op["VE_TRANSPOSE_TILE"]
    assert entry_elements(tr) == 16 * 32 and tr.length == 32


def test_pe_resolution() -> None:
    limits = CmdqLimits.default_small()
    doc = spec_example()
    for pe, index in [(None, 0), (2, 2), ("sip0.cube0.pe3", 3), ("pe1", 1), ("cube0.pe2", 2)]:
        doc["cmdq"][0]["pe"] = pe
        entry = parse_program(doc).cmdq[0]
        assert entry_pe_index(entry, limits) == index
        assert entry_tcm_ranges(entry, limits)[0].pe == index
    with pytest.raises(ValueError, match="pass limits"):
        entry_pe_index(entry)
