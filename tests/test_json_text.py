"""report.json_text.dump_indented writes exactly what json.dump(indent=1, sort_keys=True)
writes, for any JSON value, and leaves what it does not handle to json.dump."""

from __future__ import annotations

import enum
import io
import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kernbench.report.json_text import dump_indented

_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
            | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8))
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=6), inner, max_size=5),
    max_leaves=40,
)


def _both(obj):  # noqa: ANN001, ANN202
    ours = io.StringIO()
    dump_indented(obj, ours)
    ref = io.StringIO()
    json.dump(obj, ref, indent=1, sort_keys=True)
    return ours.getvalue(), ref.getvalue()


@settings(max_examples=300, deadline=None)
@given(_values)
def test_same_text_as_json_dump(obj):
    ours, ref = _both(obj)
    assert ours == ref


class _Color(enum.IntEnum):
    RED = 1


def test_values_it_leaves_to_json_dump_give_json_dumps_text():
    for obj in ({"a": [_Color.RED, 2]}, {1: "int key"}, [3, True, None],
                {"x": -0.0, "y": math.pi, "z": [float("nan")]}, {"é": "ünï"}):
        ours, ref = _both(obj)
        assert ours == ref


def test_a_type_json_refuses_is_refused_the_same_way():
    for obj in ({"a": np.float32(1.5)}, {"a": {1, 2}}):
        try:
            json.dump(obj, io.StringIO(), indent=1, sort_keys=True)
        except TypeError as e:
            want = str(e)
        f = io.StringIO()
        try:
            dump_indented(obj, f)
        except TypeError as e:
            assert str(e) == want
        else:
            raise AssertionError("no TypeError")


def test_a_cycle_is_json_dumps_error():
    a: list = []
    a.append(a)
    try:
        dump_indented(a, io.StringIO())
    except ValueError as e:
        assert "Circular reference" in str(e)
    else:
        raise AssertionError("no ValueError")


def test_large_documents_are_streamed_in_blocks():
    obj = {"cmdq": [{"id": i, "deps_before": [i - 1] if i else []} for i in range(30000)]}
    ours, ref = _both(obj)
    assert ours == ref


def test_dicts_sharing_keys_in_any_order_and_at_any_depth():
    # the writer keeps each key set's layout for the next dict with the same keys: the
    # same keys in another insertion order, at another depth, or with values of other
    # types (a bool where an int was, a str subclass, a nested dict) must still come out
    # as json.dump writes them
    class S(str):
        pass

    entries = [{"opcode": "DMA", "id": i, "pe": i % 3, "deps_before": [i, i + 1]}
               for i in range(5)]
    entries += [{"pe": True, "id": None, "deps_before": [], "opcode": S("x")},
                {"deps_before": [{"opcode": 1, "id": 2, "pe": 3, "deps_before": 4}],
                 "id": 1.5, "opcode": "é", "pe": -1}]
    obj = {"cmdq": entries, "nested": {"cmdq": entries[:2], "id": 0}}
    ours, ref = _both(obj)
    assert ours == ref
