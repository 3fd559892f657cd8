"""Attention split along the keys over PEs (flash-decoding, ADR-0714): the combine's
numerics against a plain numpy softmax, which layers are split, and a decode step that
is exact against the interpreter with its key ranges on PEs of their own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.cmdq.io import unfused
from kernbench.compiler.kv_blocks import MIN_PART_KEYS, kv_first_for, kv_parts_for
from kernbench.ir.model import Graph, LayerIR, TensorIR
from kernbench.numerics.flash import combine_part, init_state, kv_part_bounds
from kernbench.sim_engine import math_fused  # noqa: F401  (registers the data-pass ops)
from kernbench.sim_engine.math_registry import MATH_OPS
from kernbench.topology import load_topology


def _part(s: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One key range by plain numpy: unnormalized output and state (m, l, 0, 0)."""
    m = s.max(axis=-1)
    safe = np.where(np.isneginf(m), 0, m)
    e = np.exp(s - safe[:, None])
    st = init_state((s.shape[0],))
    st[:, 0], st[:, 1] = m, e.sum(axis=-1)
    return (e @ v).astype(np.float32), st


def _scores(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores (3 rows × 40 keys), V (40 × 8) and softmax(scores) · V by plain numpy."""
    rng = np.random.default_rng(seed)
    s = (rng.standard_normal((3, 40)) * 4).astype(np.float32)
    v = rng.standard_normal((40, 8)).astype(np.float32)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return s, v, (p / p.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize("cuts", [(0, 5, 40), (0, 13, 26, 39, 40), (0, 1, 40)])
def test_combined_ranges_equal_one_softmax(cuts):
    s, v, ref = _scores(len(cuts))
    o, st = _part(s[:, cuts[0]:cuts[1]], v[cuts[0]:cuts[1]])
    for i in range(1, len(cuts) - 1):
        op, sp = _part(s[:, cuts[i]:cuts[i + 1]], v[cuts[i]:cuts[i + 1]])
        o, st = combine_part(o, st, op, sp, last=i == len(cuts) - 2)
    np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(st[:, 0], s.max(axis=-1))


@pytest.mark.parametrize("cuts", [(0, 5, 40), (0, 13, 26, 39, 40), (0, 1, 2, 3, 4, 40)])
def test_one_combine_op_folds_every_helper_range_into_one_softmax(cuts):
    """VE_ATTN_COMBINE_TILE with `parts` (ADR-0723), as the data pass runs it: the
    owner's range, then every helper range folded by one op, equals one softmax."""
    s, v, ref = _scores(len(cuts))
    o, st = _part(s[:, cuts[0]:cuts[1]], v[cuts[0]:cuts[1]])
    helpers = [_part(s[:, a:b], v[a:b]) for a, b in zip(cuts[1:], cuts[2:], strict=False)]
    got, got_st = MATH_OPS["flash_combine"](
        [np.stack([h[0] for h in helpers]), np.stack([h[1] for h in helpers]), st, o],
        {"last": True})
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_st[:, 0], s.max(axis=-1))
    for ho, hs in helpers:  # the same bits as one op a part
        o, st = combine_part(o, st, ho, hs, last=ho is helpers[-1][0])
    assert np.array_equal(got, o) and np.array_equal(got_st, st)


def test_a_fully_masked_range_adds_nothing():
    rng = np.random.default_rng(1)
    s = rng.standard_normal((2, 6)).astype(np.float32)
    v = rng.standard_normal((6, 4)).astype(np.float32)
    o, st = _part(s, v)
    empty_o, empty_st = np.zeros((2, 4), np.float32), init_state((2,))
    got, _ = combine_part(o, st, empty_o, empty_st, last=True)
    np.testing.assert_allclose(got, o / st[:, 1:2], rtol=1e-6)
    # every range masked: 0, not NaN
    got, _ = combine_part(empty_o, init_state((2,)), empty_o, empty_st, last=True)
    assert np.array_equal(got, np.zeros((2, 4), np.float32))


@pytest.mark.parametrize(("t", "parts"), [(1025, 5), (600, 4), (7, 3), (3, 5)])
def test_part_bounds_cover_the_keys_evenly(t, parts):
    b = kv_part_bounds(t, parts)
    assert b[0][0] == 0 and b[-1][1] == t
    assert all(x[1] == y[0] for x, y in zip(b, b[1:], strict=False))
    lens = [hi - lo for lo, hi in b]
    assert len(b) == min(t, parts) and min(lens) >= 1 and max(lens) - min(lens) <= 1


@pytest.mark.parametrize(("t", "parts", "first"), [(1024, 5, 256), (701, 5, 189), (9, 3, 5)])
def test_part_bounds_give_the_first_range_its_keys_and_share_the_rest(t, parts, first):
    b = kv_part_bounds(t, parts, first)
    assert b[0] == (0, first) and b[-1][1] == t and len(b) == parts
    assert all(x[1] == y[0] for x, y in zip(b, b[1:], strict=False))
    rest = [hi - lo for lo, hi in b[1:]]
    assert max(rest) - min(rest) <= 1
    # a first range that would leave another empty is ignored: equal ranges
    assert kv_part_bounds(4, 3, 3) == kv_part_bounds(4, 3)


@pytest.mark.parametrize(("t", "parts", "cols", "want"), [
    (1024, 5, 32, 256),   # 4 helpers × 192 keys (6 folds, not 7), the owner 256
    (701, 5, 32, 189),    # 4 × 128, the owner 49 keys over an equal share
    (601, 4, 32, 0),      # 4 × 128 would give the owner 67 keys more: too much
    (1024, 8, 32, 0),     # 128 each: already whole folds
    (1024, 1, 32, 0),     # not split
    (100, 4, 32, 0),      # a range shorter than a fold
])
def test_owner_range_takes_what_the_helpers_whole_folds_leave(t, parts, cols, want):
    assert kv_first_for(t, parts, cols) == want


def _attention_graph(b: int, hq: int, hkv: int, s: int, t: int) -> tuple[Graph, LayerIR]:
    g = Graph()
    for tid, shape in (("q", [b, hq, s, 64]), ("k", [b, hkv, t, 64]), ("v", [b, hkv, t, 64]),
                       ("o", [b, hq, s, 64])):
        g.tensors[tid] = TensorIR(id=tid, shape=shape, dtype="fp32", role="activation")
    n = LayerIR(id="attention_0", op_type="ATTENTION", inputs=["q", "k", "v"], outputs=["o"],
                attributes={"num_heads": hq, "num_kv_heads": hkv, "head_dim": 64,
                            "scale": 0.125},
                qbits_activation=8, qbits_kv=8)
    g.nodes.append(n)
    return g, n


def test_which_layers_are_split():
    # a gpt2-small decode step on 64 PEs: 12 groups of one query row, 1025 keys
    g, n = _attention_graph(1, 12, 12, 1, 1025)
    assert kv_parts_for(g, n, 64, 32) == 5
    # the same step on 16 PEs: one PE per group already
    assert kv_parts_for(g, n, 16, 32) == 1
    # prefill: 128 query rows per group fill the array's rows, no split
    g, n = _attention_graph(1, 12, 12, 128, 1025)
    assert kv_parts_for(g, n, 64, 32) == 1
    # a short cache: a range keeps at least MIN_PART_KEYS keys
    g, n = _attention_graph(1, 4, 2, 1, 2 * MIN_PART_KEYS + 5)
    assert kv_parts_for(g, n, 64, 32) == 2
    # grouped queries count as rows of one group: 8 heads per KV head x 4 rows = 32 fit
    g, n = _attention_graph(1, 32, 4, 4, 4096)
    assert kv_parts_for(g, n, 64, 32) == 16
    g, n = _attention_graph(1, 32, 4, 5, 4096)
    assert kv_parts_for(g, n, 64, 32) == 1
    # float attention (no integer tiles) is not split
    g, n = _attention_graph(1, 12, 12, 1, 1025)
    n.qbits_activation = None
    assert kv_parts_for(g, n, 64, 32) == 1


def _assert_exact(out: Path) -> None:
    """The run in `out` was checked against the interpreter, and matched it exactly."""
    v = json.loads((out / "verification.json").read_text())
    assert "interpreter" in {c["reference"] for c in v["checks"]}
    assert all(c["max_abs_err"] == 0 for c in v["checks"] if c["reference"] == "interpreter")


def test_decode_step_split_over_pes_is_exact(tmp_path: Path, capsys):
    out = tmp_path / "out"
    code = main(["run", "llama", "--seq-len", "1", "--kv-len", "600", "-t", "base",
                 "--verify", "--keep-bundle", "--out", str(out), "--no-report", "--quiet"])
    assert code == 0, capsys.readouterr().err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"]
    assert all(c["max_abs_err"] == 0 for c in v["checks"] if c["reference"] == "interpreter")
    bundle = out / "bundle"
    ir = json.loads((bundle / "ir.json").read_text())
    attn = [n for n in ir["graph"]["nodes"] if n["op_type"] == "ATTENTION"]
    parts = attn[0]["attributes"]["kv_parts"]
    assert parts == 601 // MIN_PART_KEYS  # 2 KV groups leave 32 PEs per group
    heads = attn[0]["attributes"]["num_heads"]
    cmdq = json.loads((bundle / "cmdq.json").read_text())["cmdq"]
    for a in attn:
        mine = unfused([e for e in cmdq if e.get("layer_id") == a["id"]])
        combines = [e for e in mine if e["opcode"] == "VE_ATTN_COMBINE_TILE"]
        # one combine a KV group folds every helper's range in (ADR-0723), the group's
        # query heads packed a row each (ADR-1285)
        groups = a["attributes"]["num_kv_heads"]
        assert len(combines) == groups
        assert all(e["last"] and e["parts"] == parts - 1 and e["rows"] == heads // groups
                   for e in combines)
        # Q·Kᵀ of each range runs on a PE of its own: the groups' ranges use
        # kv heads x parts PEs
        qk = {e["pe"] for e in mine if e["opcode"] == "TE_GEMM_TILE"
              and e.get("transpose_wgt")}
        assert len(qk) == a["attributes"]["num_kv_heads"] * parts


def _attention_busy(tmp_path: Path, name: str) -> tuple[float, float]:
    out = tmp_path / name
    assert main(["run", "llama", "--seq-len", "1", "--kv-len", "1024", "-t", "base",
                 "--out", str(out), "--no-trace", "--quiet"]) == 0
    stats = json.loads((out / "stats.json").read_text())
    busy = [v["busy_ns"] for v in stats["layers"].values() if v["op_type"] == "ATTENTION"]
    return sum(busy), stats["total_ns"]


def test_split_decode_attention_is_faster(tmp_path, monkeypatch):
    split_busy, split_total = _attention_busy(tmp_path, "split")
    monkeypatch.setattr("kernbench.compiler.kv_blocks.MIN_PART_KEYS", 10**9)
    whole_busy, whole_total = _attention_busy(tmp_path, "whole")
    assert split_busy < 0.6 * whole_busy
    assert split_total < whole_total


def test_split_decode_attention_reads_query_rows_its_projection_quantized(tmp_path, capsys):
    """gpt2 decode (Q not rotated): the QKV projection stores Q at 8 bits (ADR-0725), so
    no key range's PE loads float query rows or quantizes them; the owner's key range is
    the longest (ADR-0726); exact against the interpreter."""
    out = tmp_path / "out"
    code = main(["run", "gpt2", "--seq-len", "1", "--kv-len", "700", "-t", "base",
                 "--verify", "--keep-bundle", "--out", str(out), "--no-report", "--quiet"])
    assert code == 0, capsys.readouterr().err[-2000:]
    _assert_exact(out)
    bundle = out / "bundle"
    ir = json.loads((bundle / "ir.json").read_text())
    attn = [n for n in ir["graph"]["nodes"] if n["op_type"] == "ATTENTION"]
    assert attn and all(a["attributes"]["kv_parts"] > 1 for a in attn)
    # 701 keys in P ranges: the helpers take whole folds of 32, the owner the rest, longer
    # than an equal share (ADR-0726), still exact
    for a in attn:
        parts = a["attributes"]["kv_parts"]
        helper = 701 // parts // 32 * 32
        assert a["attributes"]["kv_first"] == 701 - (parts - 1) * helper > 701 // parts
    mem = json.loads((bundle / "memory.json").read_text())["tensors"]
    cmdq = json.loads((bundle / "cmdq.json").read_text())["cmdq"]
    # one int8 Q scratch per layer (K and V go through the KV cache update)
    assert len([k for k in mem if k.endswith("@kv8")]) == len(attn)

    for a in attn:
        entries = [e for e in cmdq if e.get("layer_id") == a["id"]]
        # each key block's dequantize → softmax step → row scale → quantize is one
        # command that keeps the row scale for the merge (ADR-0727); the owners' combine
        # and quantize are another
        chains = [tuple(s["opcode"] for s in e["steps"]) for e in entries if "steps" in e]
        block = ("VE_DEQUANTIZE_TILE", "VE_SOFTMAX_BLOCK_TILE", "VE_ROWSCALE_TILE",
                 "VE_QUANTIZE_TILE")
        assert chains.count(block) == a["attributes"]["num_heads"] * a["attributes"]["kv_parts"]
        assert all(e["keep"] == [2] for e in entries if "steps" in e and len(e["steps"]) == 4)
        assert chains.count(("VE_ATTN_COMBINE_TILE", "VE_QUANTIZE_TILE")) == \
            a["attributes"]["num_heads"]
        assert not any(e["opcode"] == "VE_SOFTMAX_BLOCK_TILE" for e in entries)
        mine = unfused(entries)
        qk = [e for e in mine if e["opcode"] == "TE_GEMM_TILE" and e.get("transpose_wgt")]
        # every range's query load is int8, and the only quantizes without row scales
        # are the owners' output blocks (one per head, before their store)
        loads = [e for e in mine if e["opcode"] == "DMA_LOAD_TILE"
                 and e.get("tensor_role") == "activation" and e["num_elements"] == qk[0]["k"]]
        assert len(loads) == len(qk) and all(e["qbits"] == 8 for e in loads)
        plain = [e for e in mine if e["opcode"] == "VE_QUANTIZE_TILE"
                 and "row_scale_bank" not in e]
        combines = [e for e in mine if e["opcode"] == "VE_ATTN_COMBINE_TILE"]
        assert len(plain) == len(combines)


def test_helper_slots_live_in_their_owners_cube(tmp_path, capsys, monkeypatch):
    """With the KV cache spread over the four cubes (a tiny model's cache is, once the
    least part size is lowered), each group's helper slots live in its owner's cube
    (ADR-0728): every store into them and every load from them is made by a PE of that
    cube (16 PEs a cube on `base`; --all-pes: a tiny model would keep to cube 0); so
    does every load of the query's int8 copy (ADR-0730); still exact."""
    monkeypatch.setattr("kernbench.compiler.hbm.MIN_PART_BYTES", 1024)
    out = tmp_path / "out"
    code = main(["run", "gpt2", "--seq-len", "1", "--kv-len", "700", "-t", "base",
                 "--all-pes", "--verify", "--keep-bundle", "--out", str(out), "--no-report", "--quiet"])
    assert code == 0, capsys.readouterr().err[-2000:]
    _assert_exact(out)
    mem = json.loads((out / "bundle" / "memory.json").read_text())["tensors"]
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    slots = [(t["address"], t["address"] + t["nbytes"],
              int(k.rsplit("@", 1)[1]) if k.count("@") == 2 else 0)
             for k, t in mem.items() if "@kvparts" in k]
    assert len({c for _, _, c in slots}) == 4
    touching = [(e["pe"] // 16, c) for e in cmdq if e["opcode"].startswith("DMA_")
                for lo, hi, c in slots if lo <= e.get("dram_addr", -1) < hi]
    assert touching and all(pe_cube == c for pe_cube, c in touching)
    # the query's int8 copy is cut by head into the cubes of the heads' keys (ADR-0730):
    # every attention load of it is made in the cube holding that part
    cube_bytes = load_topology("base").cubes[1].hbm_base
    for key in (k for k in mem if k.endswith("@kv8")):
        parts = mem[key]["parts"]
        assert [p[2] // cube_bytes for p in parts] == [0, 1, 2, 3]
        loads = [e for e in cmdq if e["opcode"] == "DMA_LOAD_TILE"
                 and e.get("layer_id", "").startswith("attention")
                 and any(p[2] <= e["dram_addr"] < p[2] + p[1] for p in parts)]
        assert loads and all(e["dram_addr"] // cube_bytes == e["pe"] // 16 for e in loads)


def test_no_extra_folds_keeps_the_ranges_equal(monkeypatch):
    # what benchmarks/decode_ablation.py's "equal key ranges" row relies on
    monkeypatch.setattr("kernbench.compiler.kv_blocks.OWNER_EXTRA_FOLDS", 0)
    assert kv_first_for(1024, 5, 32) == 0
