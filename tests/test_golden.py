"""Behaviour did not change: every golden case writes byte-identical outputs.

The hashes in tests/golden/hashes.json were recorded before the "one house" restructure
(tests/golden/record.py). An intended change of outputs re-records them in the same commit
and says why in the commit message.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "golden_record", Path(__file__).with_name("golden") / "record.py")
_record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_record)
HASHES, cases, run_case = _record.HASHES, _record.cases, _record.run_case

GOLDEN = json.loads(HASHES.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("case_id", "argv"), cases(), ids=[c for c, _ in cases()])
def test_outputs_match_golden(case_id: str, argv: list[str]) -> None:
    assert case_id in GOLDEN, f"{case_id}: no golden hashes; run tests/golden/record.py"
    got = run_case(argv)
    want = GOLDEN[case_id]
    changed = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    assert not changed, f"{case_id}: outputs changed: {changed}"


def test_every_golden_case_is_still_run() -> None:
    assert sorted(GOLDEN) == sorted(c for c, _ in cases())
