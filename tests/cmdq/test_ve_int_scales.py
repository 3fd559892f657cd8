"""8-bit operands of the §9 vector ops have a scale (ADR-0803): the spec's own §9.2
softmax example computes a right softmax, checked against numpy float64."""

from __future__ import annotations

import numpy as np
import pytest

from kernbench.cmdq.io import parse_program
from kernbench.cmdq.opcodes.base import TcmDataEnv
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpRecord

T = "tcm:pe0"
BANK = 1 << 14
rng = np.random.default_rng(36)

SPEC_9_2 = {"opcode": "VE_SOFTMAX_TILE", "id": 0, "layer_id": "attn_softmax", "ve_id": 0,
            "in_bank": 4, "in_offset": 0, "out_bank": 4, "out_offset": 0, "length": 128,
            "qbits_activation": 8, "deps_before": [], "deps_after": []}


def _entry(fields: dict):  # noqa: ANN202
    prog = parse_program({"cmdq": [fields, {"opcode": "END", "id": 1}]})
    return prog.cmdq[0]


def _run(e, writes: dict[int, np.ndarray]) -> MemoryStore:  # noqa: ANN001
    st = MemoryStore({T: 16 * BANK})
    for bank, arr in writes.items():
        st.write(T, bank * BANK, arr)
    d = e.data(TcmDataEnv(e, "pe0", BANK))
    p = {k: v for k, v in d.items() if k not in ("op_kind", "op_name")}
    DataExecutor([OpRecord(0.0, 1.0, "pe0", d["op_kind"], d["op_name"], p)], st).run()
    return st


def _softmax64(x: np.ndarray) -> np.ndarray:
    z = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("in_scale", [None, 0.05])
def test_spec_9_2_softmax_example_gives_probabilities(in_scale):
    """Before ADR-0803 every output was 0 (probabilities cast to int8)."""
    fields = dict(SPEC_9_2)
    if in_scale is not None:
        fields["in_scale"] = in_scale
    e = _entry(fields)
    x = rng.integers(-128, 128, (1, 128)).astype(np.int8)
    if in_scale is None:  # raw integers are the logits: make a few of them close
        x[0, :4] = [120, 119, 118, 117]
    st = _run(e, {4: x})
    q = st.read(T, 4 * BANK, (1, 128), "int8")
    want = _softmax64(x * (in_scale or 1.0))
    got = q.astype(np.float64) / 127  # the default output step: 1 / 127
    assert np.abs(got - want).max() <= 0.5 / 127 + 1e-6
    assert q.max() > 0 and abs(got.sum() - 1.0) < 128 * 0.5 / 127


def test_out_scale_and_in2_of_an_8_bit_add():
    e = _entry({"opcode": "VE_ADD_TILE", "id": 0, "in_bank": 0, "in_offset": 0, "in2_bank": 1,
                "in2_offset": 0, "out_bank": 2, "out_offset": 0, "length": 64, "rows": 2,
                "qbits_activation": 8, "in_scale": 0.1, "out_scale": 0.3})
    a = rng.integers(-100, 100, (2, 64)).astype(np.int8)
    b = rng.integers(-100, 100, (2, 64)).astype(np.int8)
    st = _run(e, {0: a, 1: b})
    got = st.read(T, 2 * BANK, (2, 64), "int8")
    real = (a.astype(np.float64) + b) * np.float64(np.float32(0.1))
    want = np.clip(np.rint(real / 0.3), -128, 127)
    assert np.abs(got - want).max() <= 1  # float32 rounding at exact halves
    assert np.mean(got == want) > 0.99


def test_float_vector_ops_unchanged_by_the_scales():
    e = _entry({"opcode": "VE_SOFTMAX_TILE", "id": 0, "in_bank": 0, "in_offset": 0,
                "out_bank": 1, "out_offset": 0, "length": 32, "qbits_activation": 32,
                "in_scale": 7.0, "out_scale": 3.0})
    x = rng.standard_normal((1, 32)).astype(np.float32)
    st = _run(e, {0: x})
    np.testing.assert_allclose(st.read(T, BANK, (1, 32), "float32"), _softmax64(x),
                               rtol=1e-5, atol=1e-7)


def test_copy_without_scales_moves_integers_as_they_are():
    e = _entry({"opcode": "VE_TRANSPOSE_TILE", "id": 0, "in_bank": 0, "in_offset": 0,
                "out_bank": 1, "out_offset": 0, "rows": 3, "cols": 5, "qbits_activation": 8})
    x = rng.integers(-128, 128, (3, 5)).astype(np.int8)
    st = _run(e, {0: x})
    assert np.array_equal(st.read(T, BANK, (5, 3), "int8"), x.T)
