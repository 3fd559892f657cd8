"""The compiler, the importer's fusers and every other reader outside `ir/ops` read an IR
node's attributes through its op class's typed accessor (`node_attrs(n).axis`, defaults
from the declaration), never by key (`n.attributes["axis"]`, `.attributes.get("axis", 2)`
with a default of its own). Writing an attribute (a pass that annotates a node, an
importer building one) is by key, as it must be."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "kernbench"
#: the accessor itself and the serialized node
OWNERS = (SRC / "ir" / "ops", SRC / "ir" / "model.py")
#: `.attributes.get(...)`, or `.attributes[...]` not followed by an assignment
READ = re.compile(r"\.attributes\.get\(|\.attributes\[[^\]]+\](?!\s*=[^=])")


def _reads(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if READ.search(line)]


def test_no_attribute_is_read_by_key_outside_the_op_classes():
    found = {}
    for f in sorted(SRC.rglob("*.py")):
        if any(f == o or o in f.parents for o in OWNERS):
            continue
        lines = _reads(f.read_text())
        if lines:
            found[str(f.relative_to(SRC))] = lines
    assert not found, found


def test_the_pattern_tells_a_read_from_a_write():
    assert _reads('x = n.attributes["axis"]') and _reads('n.attributes.get("view")')
    assert _reads('if n.attributes["perm"] == [1, 0]:')
    assert not _reads('n.attributes["kv_block"] = blk')
    assert not _reads('x = node_attrs(n).axis')
