"""Data semantics of TE_CONV_TILE and VE_ROPE_TILE: the descriptions cmdq/data.py gives
them, executed by the data pass on TCM contents, against independent numpy loops."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernbench.cmdq.opcodes.base import TcmDataEnv
from kernbench.cmdq.schema import TeConvTile, VeRopeTile
from kernbench.errors import InputError
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpRecord

T = "tcm:pe0"
BANK = 1 << 14
rng = np.random.default_rng(5)


def _run(d: dict, writes: dict[int, tuple[np.ndarray, str | None]]) -> MemoryStore:
    st = MemoryStore({T: 16 * BANK})
    for bank, (arr, dt) in writes.items():
        st.write(T, bank * BANK, arr, dt)
    p = {k: v for k, v in d.items() if k not in ("op_kind", "op_name")}
    DataExecutor([OpRecord(0.0, 1.0, "pe0", d["op_kind"], d["op_name"], p)], st).run()
    return st


def _data(e):  # noqa: ANN001, ANN202
    """The entry's data description as the host attaches it (its opcode class's `data`)."""
    return e.data(TcmDataEnv(e, "pe0", BANK))


def _conv_ref(x, w, b, stride, pad):  # noqa: ANN001, ANN202
    n, h, wd, ci = x.shape
    kh, kw, _, co = w.shape
    xp = np.zeros((n, h + 2 * pad, wd + 2 * pad, ci), np.int64)
    xp[:, pad:pad + h, pad:pad + wd] = x
    ho, wo = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, ho, wo, co), np.int64)
    for a in range(n):
        for i in range(ho):
            for j in range(wo):
                for o in range(co):
                    win = xp[a, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
                    y[a, i, j, o] = int((win * w[..., o].astype(np.int64)).sum()) + int(b[o])
    return y


@pytest.mark.parametrize("qa", [8, 4])
def test_conv_tile_int_exact_with_bias_and_accumulate(qa):
    lim = 8 if qa == 4 else 100
    e = TeConvTile(id=0, n=1, h=5, w=4, c_in=3, c_out=2, kh=3, kw=2, stride=2, padding=1,
                   qbits_activation=qa, qbits_weight=8, ifm_bank=0, ifm_offset=0,
                   wgt_bank=1, wgt_offset=0, ofm_bank=2, ofm_offset=0, bias_bank=3,
                   bias_offset=0, accumulate=True)
    x = rng.integers(-lim, lim, (1, 5, 4, 3)).astype(np.int8)
    w = rng.integers(-100, 100, (3, 2, 3, 2)).astype(np.int8)
    b = rng.integers(-1000, 1000, 2).astype(np.int32)
    h_out, w_out = e.out_hw
    prev = rng.integers(-50, 50, (1, h_out, w_out, 2)).astype(np.int32)
    d = _data(e)
    st = _run(d, {0: (x, "int4" if qa == 4 else None), 1: (w, None), 2: (prev, None),
                  3: (b, None)})
    got = st.read(T, 2 * BANK, (1, h_out, w_out, 2), "int32")
    assert np.array_equal(got, _conv_ref(x, w, b, 2, 1) + prev)


def test_conv_tile_float():
    e = TeConvTile(id=0, h=4, w=4, c_in=2, c_out=3, kh=3, kw=3, qbits_activation=16,
                   qbits_weight=16, ifm_bank=0, ifm_offset=0, wgt_bank=1, wgt_offset=0,
                   ofm_bank=2, ofm_offset=0)
    x = rng.standard_normal((1, 4, 4, 2)).astype(np.float16)
    w = rng.standard_normal((3, 3, 2, 3)).astype(np.float16)
    st = _run(_data(e), {0: (x, None), 1: (w, None)})
    got = st.read(T, 2 * BANK, (1, 2, 2, 3), "float32")
    ref = np.array([[[[sum(float(x[0, i + a, j + c, k]) * float(w[a, c, k, o])
                           for a in range(3) for c in range(3) for k in range(2))
                       for o in range(3)] for j in range(2)] for i in range(2)]])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_rope_tile(style):
    rows, hd, heads = 3, 8, 2
    e = VeRopeTile(id=0, rows=rows, length=hd * heads, head_dim=hd, style=style,
                   qbits_activation=32, in_bank=0, in_offset=0, out_bank=1, out_offset=0,
                   cos_bank=2, cos_offset=0, sin_bank=3, sin_offset=0)
    x = rng.standard_normal((rows, hd * heads)).astype(np.float32)
    ang = rng.standard_normal((rows, hd // 2))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    d = _data(e)
    st = _run(d, {0: (x, None), 2: (cos, None), 3: (sin, None)})
    got = st.read(T, BANK, (rows, hd * heads), "float32")
    for r in range(rows):
        for h in range(heads):
            v = x[r, h * hd:(h + 1) * hd].astype(np.float64)
            for i in range(hd // 2):
                pair = (i, i + hd // 2) if style == "half" else (2 * i, 2 * i + 1)
                z = complex(v[pair[0]], v[pair[1]]) * complex(math.cos(ang[r, i]),
                                                              math.sin(ang[r, i]))
                assert got[r, h * hd + pair[0]] == pytest.approx(z.real, abs=1e-5)
                assert got[r, h * hd + pair[1]] == pytest.approx(z.imag, abs=1e-5)


def test_rope_tile_without_tables_is_refused():
    e = VeRopeTile(id=3, rows=1, length=8, qbits_activation=32, in_bank=0, in_offset=0,
                   out_bank=1, out_offset=0)
    with pytest.raises(InputError, match="entry 3.*VE_ROPE_TILE needs cos_bank"):
        _data(e)


def test_gemm_tile_int16_accumulates_exactly_in_int64():
    """int16 × int16 summed over K overflows int32 (ADR-0800): with ofm_qbits 64 the data
    pass writes the exact int64 sum (+ bias + the old ofm), checked against numpy int64."""
    from kernbench.cmdq.schema import TeGemmTile

    m, n, k = 3, 4, 40
    e = TeGemmTile(id=0, m=m, n=n, k=k, qbits_activation=16, qbits_weight=16, int16=True,
                   ofm_qbits=64, accumulate=True, ifm_bank=0, ifm_offset=0, wgt_bank=1,
                   wgt_offset=0, ofm_bank=2, ofm_offset=0, bias_bank=3, bias_offset=0)
    x = rng.integers(30000, 32768, (m, k)).astype(np.int16)
    w = rng.integers(-32768, -30000, (k, n)).astype(np.int16)
    b = rng.integers(-1000, 1000, n).astype(np.int32)
    prev = rng.integers(-(1 << 40), 1 << 40, (m, n)).astype(np.int64)
    st = _run(_data(e), {0: (x, None), 1: (w, None), 2: (prev, None), 3: (b, None)})
    got = st.read(T, 2 * BANK, (m, n), "int64")
    want = x.astype(np.int64) @ w.astype(np.int64) + b + prev
    assert np.abs(want).max() > 2**31  # the case int32 wrapped
    assert np.array_equal(got, want)


def test_conv_tile_int16_weights_are_integers_and_exact():
    e = TeConvTile(id=0, h=3, w=3, c_in=2, c_out=2, kh=2, kw=2, qbits_activation=16,
                   qbits_weight=16, int16=True, ofm_qbits=64, ifm_bank=0, ifm_offset=0,
                   wgt_bank=1, wgt_offset=0, ofm_bank=2, ofm_offset=0, bias_bank=3,
                   bias_offset=0)
    x = rng.integers(30000, 32768, (1, 3, 3, 2)).astype(np.int16)
    w = rng.integers(30000, 32768, (2, 2, 2, 2)).astype(np.int16)
    b = np.zeros(2, np.int32)
    st = _run(_data(e), {0: (x, None), 1: (w, None), 3: (b, None)})
    got = st.read(T, 2 * BANK, (1, 2, 2, 2), "int64")
    assert np.array_equal(got, _conv_ref(x, w, b, 1, 0))


def test_gemm_tile_with_2_bit_weights_runs_in_the_data_pass():
    """The validator accepts 2-bit operands (spec §12); the data pass had no element type
    for them ("no element type for 2-bit data"). int2 is packed four a byte."""
    from kernbench.cmdq.schema import TeGemmTile

    m, n, k = 4, 8, 16
    e = TeGemmTile(id=0, m=m, n=n, k=k, qbits_activation=8, qbits_weight=2, ifm_bank=0,
                   ifm_offset=0, wgt_bank=1, wgt_offset=0, ofm_bank=2, ofm_offset=0)
    x = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w = rng.integers(-2, 2, (k, n)).astype(np.int8)
    st = _run(_data(e), {0: (x, None), 1: (w, "int2")})
    assert st.read(T, BANK, (k, n), "int2").tolist() == w.tolist()
    got = st.read(T, 2 * BANK, (m, n), "int32")
    assert np.array_equal(got, x.astype(np.int64) @ w.astype(np.int64))
