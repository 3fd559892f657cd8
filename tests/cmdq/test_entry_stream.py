"""`EntryStream`: a program whose entries arrive while it runs (compiler.stream) is parsed
and checked entry by entry, as `load_program` + `check_program` would do for the whole,
and runs to the same result as the same program held whole."""

from __future__ import annotations

import json

import pytest

from kernbench.cmdq.hw import limits_for
from kernbench.cmdq.io import parse_entries
from kernbench.cmdq.stream import EntryStream, streamed_program
from kernbench.errors import InputError
from kernbench.host.simulate import simulate_program
from kernbench.topology import load_topology

SMALL = load_topology("small")
LIMITS = limits_for(SMALL)


def _entries(n: int) -> list[dict]:
    """n DMA loads on two PEs, each after the one two back, then END."""
    out = [{"opcode": "DMA_LOAD_TILE", "id": i, "layer_id": f"l{i // 4}", "pe": i % 2,
            "tensor_role": "weight", "qbits": 8, "dram_addr": 64 * i, "num_elements": 64,
            "spm_bank": 0, "spm_offset": 64 * i, "deps_before": [i - 2] if i > 1 else []}
           for i in range(n)]
    out.append({"opcode": "END", "id": n, "layer_id": None,
                "deps_before": [n - 2, n - 1]})
    return out


def _stream(entries: list[dict], n: int | None = None, size: int = 3) -> EntryStream:
    chunks = (entries[i:i + size] for i in range(0, len(entries), size))
    layers: dict[str, int] = {}
    for e in entries:
        if e.get("layer_id"):
            layers[e["layer_id"]] = layers.get(e["layer_id"], 0) + 1
    return EntryStream(chunks, len(entries) if n is None else n, layers, LIMITS, "p.json")


def test_entries_arrive_in_order_and_are_forgotten():
    ents = _entries(10)
    s = _stream(json.loads(json.dumps(ents)))
    whole = parse_entries(json.loads(json.dumps(ents)), {"version": "1.1"})
    assert len(s) == 11
    assert s[4] == whole.cmdq[4] and s[0] == whole.cmdq[0]
    s[0] = None
    with pytest.raises(IndexError, match="already consumed"):
        s[0]
    with pytest.raises(TypeError, match="read by index"):
        list(s)


def test_streamed_program_simulates_like_the_whole_program():
    ents = _entries(10)
    whole = parse_entries(json.loads(json.dumps(ents)), {"version": "1.1"})
    prog = streamed_program(_stream(json.loads(json.dumps(ents))), {"version": "1.1"})
    a = simulate_program(whole, SMALL, trace=False, per_entry=False)
    b = simulate_program(prog, SMALL, trace=False, per_entry=False, consume=True)
    assert a.total_ns == b.total_ns > 0
    assert a.stats() == b.stats()
    assert {k: (v.start_ns, v.end_ns) for k, v in a.tally.spans.items()} == \
        {k: (v.start_ns, v.end_ns) for k, v in b.tally.spans.items()}


@pytest.mark.parametrize(("edit", "message"), [
    (lambda es: es[5].update(deps_before=[7]), "p.json: entry 5: field 'deps_before': names "
     "entry 7, which comes later"),
    (lambda es: es[5].update(pe=9), "p.json: entry 5: field 'pe'"),
    (lambda es: es[5].update(id=6), "p.json: entry 6: field 'id': id 6 is out of order: "
     "the entry at index 5 must have id 5"),
    (lambda es: es[5].update(qbits=7), "p.json: entry 5: field 'qbits': must be one of"),
    (lambda es: es[5].update(deps_after=[8]), "p.json: entry 5: field 'deps_after'"),
    (lambda es: es.pop(), "p.json: entry 9: field 'opcode': the last entry must be END"),
])
def test_a_bad_entry_is_refused_when_it_arrives(edit, message):
    ents = _entries(10)
    edit(ents)
    s = _stream(ents, n=len(ents))
    s[0]  # the first chunk is fine
    with pytest.raises(InputError) as info:
        for i in range(len(ents)):
            s[i]
    assert str(info.value).startswith(message)


def test_a_stream_that_ends_early_or_runs_on_is_a_bug():
    with pytest.raises(RuntimeError, match="ended after 10 of 12 entries"):
        _stream(_entries(10)[:-1], n=12)[10]
    with pytest.raises(RuntimeError, match="runs past its 5 entries"):
        _stream(_entries(10), n=5, size=6)[0]
