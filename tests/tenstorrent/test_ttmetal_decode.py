"""benchmarks/ttmetal_decode.py: tt-metal's Llama decode step, op by op (ADR-1030).
Closed forms of the DRAM-sharded matmul, the op count, the published formats, bad input."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import ttmetal_decode as td  # noqa: E402
import ttmetal_matmul as tm  # noqa: E402

from kernbench.topology import load_topology  # noqa: E402

P = {"launch_ns": 8000.0, "tile_overhead_cycles": 5.0, "unpack_words": 1.4}
L8B = td.Llama(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=128256)


@pytest.fixture(scope="module")
def n150() -> tm.Chip:
    return tm.Chip.from_topology(load_topology("n150", []))


def test_memory_bound_matmul_reads_each_banks_padded_shard(n150):
    # FF1 of Llama-3.1-8B in BFP4_B: 128 K tiles x ceil(448 / 12) = 38 N tiles per bank,
    # 576 B a tile (512 B of mantissas + 64 B of exponents), each bank at 1/12 of 240 GB/s
    t = td.dram_sharded_matmul_ns(4096, 14336, "BFLOAT4_B", "LoFi", n150, 12, P, 240.0)
    assert t == pytest.approx(128 * 38 * 576 / 20.0)


def test_compute_bound_matmul_costs_the_fidelity_cycles_on_one_core_per_bank(n150):
    # with DRAM far faster, a bank's core computes its 128 x 38 tile products at HiFi4's
    # 64 cycles (above the unpack of a 1088 B tile at 1.4 x 32 B a cycle) + the overhead
    t = td.dram_sharded_matmul_ns(4096, 14336, "BFLOAT8_B", "HiFi4", n150, 12, P, 1e9)
    assert t == pytest.approx(128 * 38 * (64 + 5.0) / 1.0)
    # LoFi's 16 cycles sit below the unpack of a BFP8 tile: the unpack rate bounds it
    lo = td.dram_sharded_matmul_ns(4096, 14336, "BFLOAT8_B", "LoFi", n150, 12, P, 1e9)
    assert lo == pytest.approx(128 * 38 * (1088 / (1.4 * 32) + 5.0))


def test_step_counts_every_published_op_and_its_launch(n150):
    r = td.decode_step(L8B, 128, n150, 12, (8, 8), P, 250.0)
    # 24 per layer; the step's own: embedding, 2 rotary lookups, reshard + final norm, 3 LM
    # head splits (matmul + memory config each), the logits' concat
    assert r["ops"] == 32 * 24 + 5 + 3 * 2 + 1
    assert r["launch_ns"] == pytest.approx(r["ops"] * 8000.0)
    assert r["step_ns"] == pytest.approx(r["launch_ns"] + r["matmul_ns"] + r["other_ns"])
    assert r["tokens_per_s"] == pytest.approx(1e9 / r["step_ns"])


def test_weight_reads_follow_the_performance_formats(n150):
    # memory-bound everywhere at 1 GB/s: the matmul time is the bytes read (ns = B / GB/s);
    # FF1 / FF3 bfp4 except in the last layer (bfp8), FF2 / QKV / WO / LM head bfp8
    r = td.decode_step(L8B, 128, n150, 12, (8, 8), {**P, "launch_ns": 0.0}, 1.0)

    def b(k, n, t):  # N padded to whole tiles on every one of the 12 banks
        return (k // 32) * math.ceil(math.ceil(n / 32) / 12) * 12 * t

    per_layer_8 = b(4096, 6144, 1088) + b(4096, 4096, 1088) + b(14336, 4096, 1088)
    expect = 32 * per_layer_8 + 31 * 2 * b(4096, 14336, 576) + 2 * b(4096, 14336, 1088) \
        + 3 * b(4096, 42752, 1088)
    assert r["matmul_ns"] == pytest.approx(expect)


def test_batch_adds_only_the_other_users_cached_rows(n150):
    # the users share one tile row of activations and every weight read; decode attention
    # reads each user's K and V: 2 x 8 heads x ceil(713 / 32) = 23 tile rows x 4 tiles of
    # head_dim x 1088 B (bfp8) per user and layer, at 250 GB/s
    one = td.decode_step(L8B, 712, n150, 12, (8, 8), P, 250.0, batch=1)
    many = td.decode_step(L8B, 712, n150, 12, (8, 8), P, 250.0, batch=32)
    assert many["ops"] == one["ops"] and many["matmul_ns"] == one["matmul_ns"]
    assert many["step_ns"] - one["step_ns"] == pytest.approx(
        32 * 31 * 2 * 8 * 23 * 4 * 1088 / 250.0)


def test_lm_head_splits_follow_the_column_cap_per_core():
    # 4096 / 32 = 128 tiles: the whole 8 x 8 grid divides it, 668 x 64 = 42752 columns a
    # split, and 128256 = 3 x 42752
    assert td.lm_head_splits(128256, 4096, (8, 8)) == [42752, 42752, 42752]
    # 3072 / 32 = 96 tiles: 8 x 8 does not divide it, 6 x 8 = 48 cores do (32064 a split)
    assert td.lm_head_splits(128256, 3072, (8, 8)) == [32064] * 4
    assert td.lm_head_splits(1000, 4096, (8, 8)) == [1000]


def test_bad_config_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 64}))
    assert td.main([str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "intermediate_size" in err[0] and str(bad) in err[0]
    assert td.main([str(tmp_path / "missing.json")]) == 2
    assert td.main(["--kv-len", "-1"]) == 2
    assert td.main(["--batch", "33"]) == 2
    capsys.readouterr()
    assert td.main(["--topology", "p150"]) == 2  # no published DRAM-sharded rate read
    assert "p150" in capsys.readouterr().err


def test_cli_prints_the_range(capsys):
    assert td.main(["--ops"]) == 0
    out = capsys.readouterr().out
    assert "| 239.0 | 780 |" in out and "| 260.0 | 780 |" in out
    assert "scaled_dot_product_attention_decode" in out
