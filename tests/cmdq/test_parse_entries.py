"""`parse_entries`: a program already decoded in memory (the compiler's document) gives the
same models as the cmdq.json written from it, consumes its list, and names a bad entry."""

from __future__ import annotations

import json

import pytest

import kernbench.cmdq.io as cmdq_io
from kernbench.cmdq.io import load_program, parse_entries
from kernbench.errors import InputError


def _doc(n: int) -> dict:
    """n DMA loads, each depending on the one before, then END."""
    entries = [{"opcode": "DMA_LOAD_TILE", "id": i, "layer_id": f"l{i % 3}", "pe": i % 2,
                "tensor_role": "weight", "qbits": 8, "dram_addr": 64 * i, "num_elements": 64,
                "spm_bank": 0, "spm_offset": 0, "deps_before": [i - 1] if i else []}
               for i in range(n)]
    entries.append({"opcode": "END", "id": n, "deps_before": [n - 1]})
    return {"cmdq": entries, "metadata": {"version": "1.1", "graph_name": "g"}}


def test_same_program_as_the_file_and_the_list_is_consumed(tmp_path, monkeypatch):
    monkeypatch.setattr(cmdq_io, "PARSE_CHUNK", 7)  # several chunks, the last one partial
    doc = _doc(30)
    path = tmp_path / "cmdq.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    from_file = load_program(path)
    entries = json.loads(json.dumps(doc["cmdq"]))
    from_memory = parse_entries(entries, doc["metadata"])
    assert entries == []  # given up as parsed
    assert from_memory == from_file
    assert [e.id for e in from_memory.cmdq] == list(range(31))


def test_bad_entry_is_named_across_chunks(monkeypatch):
    monkeypatch.setattr(cmdq_io, "PARSE_CHUNK", 4)
    doc = _doc(12)
    doc["cmdq"][9]["qbits"] = 7
    with pytest.raises(InputError) as info:
        parse_entries(doc["cmdq"], doc["metadata"], file="b/cmdq.json")
    assert str(info.value) == ("b/cmdq.json: entry 9: field 'qbits': must be one of "
                               "2, 4, 8, 16, 32, got 7")
    doc = _doc(12)
    doc["cmdq"][10] = "not an entry"  # no id: named by its index in the whole program
    with pytest.raises(InputError, match=r"entry at index 10: must be an object"):
        parse_entries(doc["cmdq"], doc["metadata"])


def test_unsupported_version_is_refused():
    doc = _doc(2)
    with pytest.raises(InputError, match="unsupported CMDQ version '2.0'"):
        parse_entries(doc["cmdq"], {"version": "2.0"})
