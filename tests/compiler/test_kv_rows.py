"""A projection storing its new K / V rows straight into the present cache (ADR-0721).

The map from the projection's output tile to the cache's rows is checked against numpy's
own reshape and transpose; the whole decode step against the IR interpreter (exact) and
against the same compile with the KV_UPDATE copying the new rows itself (the same cache
bytes either way).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.compiler.hbm import Placement, contiguous_strides
from kernbench.compiler.lower import kv_rows
from kernbench.compiler.lower.kv_rows import KvRows, _dims, _groups, _runs


def _scatter(kv: KvRows, x: np.ndarray, present: np.ndarray, m0: int, tm: int, n0: int,
             tn: int) -> None:
    """Write tile x[m0:m0+tm, n0:n0+tn] into `present` (flat) as the tile's DMAs do."""
    tile = x[m0:m0 + tm, n0:n0 + tn].reshape(-1)
    flat = present.reshape(-1)
    for t0, p0, rows, length, stride in _groups(_runs(kv, m0 * x.shape[1] + n0, tm, tn,
                                                      x.shape[1])):
        for r in range(rows):
            flat[p0 + r * stride:p0 + r * stride + length] = \
                tile[t0 + r * length:t0 + (r + 1) * length]


@pytest.mark.parametrize(("b", "s", "h", "d", "tiles"), [
    (1, 1, 12, 64, [(0, 1, 0, 768)]),                   # a decode step, one tile
    (1, 1, 12, 64, [(0, 1, n0, 96) for n0 in range(0, 768, 96)]),  # half heads at edges
    (2, 3, 4, 16, [(m0, 2, n0, 24) for m0 in (0, 2, 4) for n0 in (0, 24, 48)]),  # a batch
])
def test_tile_runs_land_where_numpy_puts_the_new_rows(b, s, h, d, tiles):
    rng = np.random.default_rng(0)
    p_len = 5
    x = rng.standard_normal((b * s, h * d)).astype(np.float32)
    # the projection's output (B·S, H·D) seen as (B, H, S, D): reshape, then transpose
    new = Placement("x", 0, (b, h, s, d), (s * h * d, d, h * d, 1), "fp32")
    shape = (b, h, p_len + s, d)
    present = Placement("p", 0, shape, contiguous_strides(shape), "fp32")
    dims = _dims(new)
    assert dims is not None
    kv = KvRows(present, p_len, dims, None, ())
    got = np.zeros(shape, np.float32)
    for m0, tm, n0, tn in tiles:
        _scatter(kv, x, got, m0, min(tm, b * s - m0), n0, min(tn, h * d - n0))
    want = np.zeros(shape, np.float32)
    want[:, :, p_len:, :] = x.reshape(b, s, h, d).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(got, want)


def test_a_decode_row_of_whole_heads_is_one_dma():
    # one row of 12 heads: 12 runs of 64 at the head stride of the cache, one 2-D DMA
    new = Placement("x", 0, (1, 12, 1, 64), (768, 64, 768, 1), "fp32")
    present = Placement("p", 0, (1, 12, 1025, 64), contiguous_strides((1, 12, 1025, 64)),
                        "int8")
    kv = KvRows(present, 1024, _dims(new), 0.5, ())
    assert _groups(_runs(kv, 0, 1, 768, 768)) == [(0, 1024 * 64, 12, 64, 1025 * 64)]


def test_a_view_that_is_no_permutation_has_no_map():
    # a strided slice skips elements: the projection's tile would not cover the view
    assert _dims(Placement("x", 0, (1, 4, 1, 16), (128, 32, 128, 1), "fp32")) is None


def _compile(tmp_path, name: str, seq: int) -> list[dict]:
    out = tmp_path / name
    assert main(["compile", "gpt2", "--seq-len", str(seq), "--kv-len", "64", "-t", "small",
                 "--quiet", "-o", str(out)]) == 0
    return json.loads((out / "cmdq.json").read_text())["cmdq"]


def test_decode_projection_stores_the_new_rows_and_kv_update_copies_the_past(tmp_path):
    cmdq = _compile(tmp_path, "d", 1)
    kv_loads = [e for e in cmdq if (e["layer_id"] or "").startswith("kv_update")
                and e["opcode"] == "DMA_LOAD_TILE"]
    # the KV_UPDATE reads the past only: every load is from a past_key_values input
    assert kv_loads and all(e["tensor_role"] == "kv" for e in kv_loads)
    proj_kv = [e for e in cmdq if (e["layer_id"] or "").startswith("qkv_proj")
               and e["opcode"] == "DMA_STORE_TILE" and e["tensor_role"] == "kv"]
    assert proj_kv  # the new K / V rows, stored by the projection into the cache


def test_prefill_rows_stay_with_the_kv_update(tmp_path):
    # more new rows than MAX_ROWS: a DMA a row would be wasteful, the KV_UPDATE copies them
    cmdq = _compile(tmp_path, "p", kv_rows.MAX_ROWS + 1)
    assert not [e for e in cmdq if (e["layer_id"] or "").startswith("qkv_proj")
                and e["opcode"] == "DMA_STORE_TILE" and e["tensor_role"] == "kv"]


def test_same_cache_bytes_with_and_without_the_projection_store(tmp_path, monkeypatch):
    def present(name: str) -> dict[str, np.ndarray]:
        out = tmp_path / name
        assert main(["run", "gpt2", "--seq-len", "1", "--kv-len", "64", "-t", "small",
                     "--verify", "--quiet", "--no-report", "--out", str(out)]) == 0
        v = json.loads((out / "verification.json").read_text())
        interp = {c["reference"]: c for c in v["checks"]}["interpreter"]
        assert interp["ok"] and interp["max_abs_err"] == 0.0
        data = np.load(out / "outputs.npz")
        return {k: data[k] for k in data.files}

    with_store = present("with")
    monkeypatch.setattr(kv_rows, "MAX_ROWS", 0)
    without = present("without")
    assert with_store.keys() == without.keys() and with_store
    for k in with_store:
        np.testing.assert_array_equal(with_store[k], without[k], err_msg=k)
