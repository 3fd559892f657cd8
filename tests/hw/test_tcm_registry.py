"""TCM partition (ADR-0014 D5.1), component registry and entry-point plugins."""

from __future__ import annotations

import pytest
from hw_helpers import spans_of

from kernbench.common.pe_commands import GemmCmd
from kernbench.components import registry
from kernbench.components.builtin.pe_gemm import PeGemm
from kernbench.components.builtin.pe_tcm import PeMemAllocator
from kernbench.errors import CapacityError, InputError


def test_allocator_never_hands_out_reserved_bytes(make_sim):
    sim = make_sim("small")
    tcm = sim.components["sip0.cube0.pe0.pe_tcm"]
    assert tcm.reserved_base == tcm.capacity - tcm.reserved_bytes
    got = []
    with pytest.raises(CapacityError, match="TCM overflow: block 24"):
        for i in range(1000):
            got.append((tcm.allocator.alloc(64 * 1024, who=f"block {i}"), 64 * 1024))
    assert all(off + n <= tcm.reserved_base for off, n in got)
    assert len(got) == tcm.reserved_base // (64 * 1024)


def test_allocator_first_fit_reuses_freed_space():
    a = PeMemAllocator("t", 1024, align=64)
    x = a.alloc(100)
    y = a.alloc(200)
    a.free(x)
    z = a.alloc(64)
    assert (x, y, z) == (0, 128, 0)
    assert a.free_bytes() == 1024 - 64 - 256


def test_unknown_impl_is_an_input_error(make_sim):
    with pytest.raises(InputError, match="no timing model 'nope' for kind 'pe_gemm'"):
        make_sim("small", "cube.pe_template.pe_gemm.impl=nope")


class _HalfSpeedGemm(PeGemm):
    def service(self, token):  # noqa: ANN001
        return 2 * super().service(token)


class _EP:
    name = "pe_gemm.half_speed"

    def load(self):
        return _HalfSpeedGemm


def test_entry_point_plugin_swaps_the_timing_model(make_sim, monkeypatch):
    monkeypatch.setattr(registry, "entry_points", lambda group: [_EP()] if
                        group == registry.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(registry, "_loaded_plugins", False)
    try:
        base = make_sim("small")
        base.submit(0, GemmCmd(label="g", params={"m": 64, "n": 64, "k": 64}))
        base.run()
        slow = make_sim("small", "cube.pe_template.pe_gemm.impl=half_speed")
        slow.submit(0, GemmCmd(label="g", params={"m": 64, "n": 64, "k": 64}))
        slow.run()
        (b,) = spans_of(base, "pe0.pe_gemm")
        (s,) = spans_of(slow, "pe0.pe_gemm")
        assert s[3] - s[2] == 2 * (b[3] - b[2])
        assert type(slow.components["sip0.cube0.pe0.pe_gemm"]) is _HalfSpeedGemm
    finally:
        registry._REGISTRY.pop(("pe_gemm", "half_speed"), None)
