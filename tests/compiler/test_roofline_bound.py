"""Physics: no simulated run beats its roofline (docs/performance.md, ADR-0702).

The roofline divides a layer's MACs and vector work by the peak of *all* PEs and its
compulsory HBM bytes by the aggregate HBM bandwidth (compiler/roofline.py). So
- end to end, the simulated time is at least Σ compute bound and at least Σ memory bound
  (every layer's work is done by some PE, every compulsory byte crosses some HBM);
- per layer, the span of the layer's own entries holds all of its work and bytes, so it
  is at least the layer's bound.
Checked over single- and multi-cube topologies, a prefill and a decode step, a llama and
a shape-only model built from a Hugging Face config.json. The cost model's estimate rides
along in the same stats (present, positive, per layer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kernbench.cli import main
from kernbench.topology import load_topology

HF = Path(__file__).resolve().parents[1] / "hf_configs"
#: (model, topology, extra CLI args)
CASES = [
    ("gpt2", "small", []),
    ("gpt2", "base", []),
    ("llama", "base", ["--kv-len", "32", "--seq-len", "1"]),
    (str(HF / "tiny-llama.json"), "base", ["--seq-len", "64"]),
    (str(HF / "tiny-gpt2.json"), "small", ["--seq-len", "32"]),
]
#: rounding: bounds and spans are rounded to 1e-3 ns in stats.json
EPS = 1e-2


@pytest.mark.parametrize("model,topology,extra", CASES,
                         ids=[f"{Path(m).stem}-{t}" for m, t, _ in CASES])
def test_simulated_time_is_never_below_the_roofline(tmp_path, model, topology, extra):
    out = tmp_path / "run"
    assert main(["run", model, "--topology", topology, "--out", str(out), "--no-report", "--trace",
                 "--quiet", *extra]) == 0
    stats = json.loads((out / "stats.json").read_text())
    mb = stats["model_bound"]
    total = stats["total_ns"]
    assert total + EPS >= mb["compute_bound_ns"], mb
    assert total + EPS >= mb["memory_bound_ns"], mb
    assert stats["layers"]
    # the other side: each bound is its definition, not merely below the time. Memory:
    # the layer's bytes over every cube's channels × channel bandwidth, by hand
    topo = load_topology(topology)
    hbm = topo.config.cube.hbm_ctrl
    hbm_gbs = len(topo.cubes) * hbm.channels * hbm.channel_bw_gbs
    for lid, layer in stats["layers"].items():
        assert layer["ns"] + EPS >= layer["bound_ns"], (lid, layer)
        assert layer["roofline_fraction"] <= 1.0 + 1e-6, (lid, layer)
        assert layer["estimate_ns"] > 0, lid
        assert layer["memory_bound_ns"] == pytest.approx(layer["bytes"] / hbm_gbs, abs=2e-3), lid
        assert layer["bound_ns"] == max(layer["compute_bound_ns"], layer["memory_bound_ns"])
    layers = stats["layers"].values()
    assert mb["compute_bound_ns"] == pytest.approx(sum(v["compute_bound_ns"] for v in layers),
                                                   abs=EPS)
    assert mb["memory_bound_ns"] == pytest.approx(sum(v["memory_bound_ns"] for v in layers),
                                                  abs=EPS)
    assert stats["estimate_ns"] > 0


def test_a_gather_of_a_large_table_is_bound_by_the_rows_it_reads(tmp_path):
    """An embedding of a 32k × 256 table at seq 8 reads 8 rows, not the table: its bound
    (compulsory bytes) counts those rows, so a tiled gather cannot beat it (a whole-table
    count put Llama-3-8B prefill at 1.16 of its roofline)."""
    cfg = json.loads((HF / "tiny-llama.json").read_text())
    cfg.update(vocab_size=32768, hidden_size=256, intermediate_size=512)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "run"
    assert main(["run", str(path), "-t", "base", "--seq-len", "8", "--out", str(out),
                 "--no-report", "--quiet"]) == 0
    stats = json.loads((out / "stats.json").read_text())
    (emb,) = [v for v in stats["layers"].values() if v["op_type"] == "EMBEDDING"]
    row_bytes = 8 * 256 * 4  # the gathered rows (read) and the output (written), fp32
    assert emb["bytes"] <= 2 * row_bytes + 8 * 8  # + the int64 ids
    assert emb["ns"] + EPS >= emb["bound_ns"] and emb["roofline_fraction"] <= 1.0 + 1e-6
    assert stats["total_ns"] + EPS >= stats["model_bound"]["memory_bound_ns"]


def test_integer_attention_is_bound_at_its_operands_bits(tmp_path):
    """Q·Kᵀ and P·V of an integer attention take 8-bit Q / P and 8-bit K / V, so its
    compute bound is its MACs at the array's 8-bit peak. (It once took the peak of 32-bit
    operands, a quarter of it, because an attention has no weight bits; with its K / V
    quantized by their producer the seq-1024 prefill ran below that bound.)"""
    out = tmp_path / "run"
    assert main(["run", "llama", "--seq-len", "64", "--topology", "small", "--out", str(out),
                 "--no-report", "--no-trace", "--keep-bundle", "--quiet"]) == 0
    stats = json.loads((out / "stats.json").read_text())
    doc = json.loads((out / "bundle" / "ir.json").read_text())
    nodes, tensors = doc["graph"]["nodes"], doc["tensors"]
    cube = yaml.safe_load((out / "bundle" / "topology.yaml").read_text())["cube"]
    gemm = cube["pe_template"]["pe_gemm"]
    n_pes = len(cube["pe_layout"])  # `small`: one cube
    attn = [n for n in nodes if n["op_type"] == "ATTENTION"]
    assert attn and all(n["qbits_activation"] == 8 and n["qbits_kv"] == 8 for n in attn)
    for n in attn:
        b, hq, s, d = tensors[n["inputs"][0]]["shape"]
        t, dv = tensors[n["inputs"][1]]["shape"][2], tensors[n["inputs"][2]]["shape"][3]
        macs = b * hq * s * t * (d + dv)
        # 8-bit operands: throughput factor 1
        want = macs / (n_pes * gemm["rows"] * gemm["cols"] * gemm["clock_ghz"])
        assert stats["layers"][n["id"]]["compute_bound_ns"] == pytest.approx(want, abs=1e-3)
