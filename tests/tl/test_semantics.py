"""tl front end semantics: pass-1 data, pending values, errors, composite / wait,
determinism and the launch result."""

from __future__ import annotations

import json
import traceback

import numpy as np
import pytest

import kernbench
from kernbench import tl
from kernbench.errors import AddressError
from kernbench.tl import KernelError, PendingValueError


@kernbench.jit
def branch_on_loaded(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    flag = tl.load(x_ptr)  # real data in pass 1
    v = tl.load(x_ptr + 1 + offs)
    if flag > 0:
        tl.store(y_ptr + offs, v * 2.0)
    else:
        tl.store(y_ptr + offs, v - 1.0)


@pytest.mark.parametrize("flag", [1.0, -1.0])
def test_branch_on_loaded_value(flag):
    x = np.concatenate([[flag], np.arange(8)]).astype(np.float32)
    X, Y = kernbench.to_device(x), kernbench.empty(8, np.float32)
    branch_on_loaded[(1,)](X, Y, BLOCK=8)
    assert np.array_equal(Y.numpy(), x[1:] * 2 if flag > 0 else x[1:] - 1)


@kernbench.jit
def branch_on_computed(x_ptr, y_ptr):
    s = tl.sum(tl.load(x_ptr + tl.arange(0, 4)), axis=0)
    if s > 0:  # computed: pending in pass 1
        tl.store(y_ptr, s)


def test_branch_on_computed_value_fails():
    X, Y = kernbench.to_device(np.ones(4, np.float32)), kernbench.empty(1, np.float32)
    with pytest.raises(PendingValueError, match=r"test_semantics.py:\d+: the truth value of a "
                       r"value computed by greater at .*pending until the data pass"):
        branch_on_computed[(1,)](X, Y)


@kernbench.jit
def oob(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n))


def test_out_of_bounds_names_line_and_offsets():
    X, Y = kernbench.to_device(np.ones(10, np.float32)), kernbench.empty(16, np.float32)
    with pytest.raises(KernelError) as ei:
        oob[(2,)](X, Y, 16, BLOCK=8)  # n is wrong: lanes 10..15 of x are read
    msg = str(ei.value)
    assert "test_semantics.py" in msg and "tl.load out of bounds" in msg
    assert "[10, 11, 12, 13, 14, 15]" in msg and "not covered by the mask" in msg
    oob[(2,)](X, Y, 10, BLOCK=8)  # correct mask: fine
    assert np.array_equal(Y.numpy()[:10], np.ones(10))


@kernbench.jit
def hog(x_ptr, BLOCK: tl.constexpr):
    keep = []
    for _ in range(64):
        keep.append(tl.load(x_ptr + tl.arange(0, BLOCK)))


def test_tcm_overflow_names_line():
    X = kernbench.to_device(np.ones(65536, np.float32))
    with pytest.raises(KernelError, match=r"test_semantics.py:\d+: TCM overflow"):
        hog[(1,)](X, BLOCK=65536)


@kernbench.jit
def raises(x_ptr):
    v = tl.load(x_ptr)
    return 1 // int(v)  # ZeroDivisionError on purpose


def test_python_exception_has_kernel_traceback():
    X = kernbench.to_device(np.zeros(1, np.int32))
    with pytest.raises(ZeroDivisionError) as ei:
        raises[(1,)](X)
    frames = traceback.extract_tb(ei.value.__traceback__)
    assert frames[-1].name == "raises" and "1 // int(v)" in frames[-1].line
    assert not any("greenlet" in f.filename for f in frames)


@kernbench.jit
def composite_kernel(a_ptr, b_ptr, c_ptr, WAIT: tl.constexpr):
    i = tl.arange(0, 16)
    a = tl.load(a_ptr + i[:, None] * 16 + i[None, :])
    b = tl.load(b_ptr + i[:, None] * 16 + i[None, :])
    h = tl.composite(op="gemm", a=a, b=b)
    if WAIT:
        tl.wait(h)
    e = tl.composite(op="math", fn="exp", inputs=[h.result * 0.01])
    tl.store(c_ptr + i[:, None] * 16 + i[None, :], tl.wait(e))


def test_composite_wait_and_race():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 16)).astype(np.float32)
    A, B = kernbench.to_device(a), kernbench.to_device(b)
    C = kernbench.empty((16, 16), np.float32)
    composite_kernel[(1,)](A, B, C, WAIT=True)
    ref = np.exp((a @ b) * np.float32(0.01))
    np.testing.assert_allclose(C.numpy(), ref, rtol=1e-5)
    C2 = kernbench.empty((16, 16), np.float32)
    # the consumer races the un-waited GEMM: in pass 2 it reads the result buffer before
    # the GEMM wrote it
    with pytest.raises(AddressError, match="never written"):
        composite_kernel[(1,)](A, B, C2, WAIT=False)


def _run_add():
    from kernbench.triton_emu.runtime import DEVICE

    DEVICE.reset()
    x = np.arange(300, dtype=np.float32)
    X, Y = kernbench.to_device(x), kernbench.empty(320, np.float32)
    r = oob[(kernbench.cdiv(300, 64),)](X, Y, 300, BLOCK=64)
    assert np.array_equal(Y.numpy()[:300], x)
    return r


def test_deterministic_and_stats_schema():
    r1, r2 = _run_add(), _run_add()
    assert json.dumps(r1.stats, sort_keys=True) == json.dumps(r2.stats, sort_keys=True)
    assert json.dumps(r1.trace, sort_keys=True) == json.dumps(r2.trace, sort_keys=True)
    for key in ("schema_version", "total_ns", "engines", "links", "memories", "bottleneck"):
        assert key in r1.stats
    assert r1.stats["kernel"]["programs"] == 5 and r1.total_ns == r1.stats["total_ns"]
    # program i runs on PE i mod 4: PE0 ran programs 0 and 4 (2 loads + 2 stores)
    assert r1.stats["engines"]["sip0.cube0.pe0.pe_dma"]["ops"] == 4
    assert r1.stats["engines"]["sip0.cube0.pe1.pe_dma"]["ops"] == 2


def test_pes_option_limits_placement():
    from kernbench.triton_emu.runtime import DEVICE

    DEVICE.reset()
    X, Y = kernbench.to_device(np.ones(256, np.float32)), kernbench.empty(256, np.float32)
    r = oob[(4,)](X, Y, 256, BLOCK=64, pes=1)
    assert r.stats["engines"]["sip0.cube0.pe0.pe_dma"]["ops"] == 8
    assert r.stats["engines"]["sip0.cube0.pe1.pe_dma"]["ops"] == 0


def test_store_then_load_in_one_program_sees_value():
    @kernbench.jit
    def k(x_ptr, y_ptr):
        i = tl.arange(0, 4)
        v = tl.load(x_ptr + i)
        tl.store(y_ptr + i, v)
        w = tl.load(y_ptr + i)  # real: the stored value was loaded data
        if tl.sum(w, axis=0).kind == "pending" and w[0] == 3.0:
            tl.store(y_ptr + i, w + 1.0)

    X, Y = kernbench.to_device(np.full(4, 3.0, np.float32)), kernbench.empty(4, np.float32)
    k[(1,)](X, Y)
    assert np.array_equal(Y.numpy(), np.full(4, 4.0))


def test_import_kernbench_is_light():
    import subprocess
    import sys

    code = ("import sys, kernbench; print(any(m.startswith(('simpy', 'greenlet', 'onnx', "
            "'kernbench.triton_emu')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
