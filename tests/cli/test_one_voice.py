"""Issue 39 items 1-3: one definition per number, one voice, the precision of every run.

A run prints its result once on stdout (human units), stderr carries the tables and no
summary line, summary.txt begins with stdout's text; the bottleneck line and the run's
bound verdict come from one source (stats.json `bottleneck`), so they cannot contradict;
each printed figure is the stats.json value under its documented name; `precision` counts
the widths the IR's layers run at (checked against the bundle's own ir.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.report.result_text import summary_lines
from kernbench.report.units import fmt_time
from kernbench.report.verdict import bottleneck_line, bound_class

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "hf_configs" / "tiny-llama.json"


def _run(out: Path, capsys, *extra: str) -> tuple[dict, str, str]:
    assert main(["run", str(TINY), "--out", str(out), "--no-report", *extra]) == 0
    cap = capsys.readouterr()
    return json.loads((out / "stats.json").read_text()), cap.out, cap.err


@pytest.mark.parametrize("kind,cls", [("pe_gemm", "compute"), ("pe_math", "compute"),
                                      ("pe_dma", "memory"), ("pe_fetch_store", "memory"),
                                      ("hbm_ctrl", "memory"), ("ch3", "memory"),
                                      ("link", "interconnect")])
def test_the_verdict_is_the_bottleneck_class(kind, cls):
    b = {"component": "x", "kind": kind, "utilization": 0.5, "bound_by": bound_class(kind)}
    assert bound_class(kind) == cls
    assert bottleneck_line(b).endswith(f"the run is {cls}-bound")


def test_one_voice_one_verdict_same_values(tmp_path, capsys):
    stats, out, err = _run(tmp_path / "o", capsys)
    b = stats["bottleneck"]
    # one source: the top-level bottleneck gives the verdict, the llm section copies it
    assert b["bound_by"] == bound_class(b["kind"])
    assert stats["llm"]["bottleneck"]["bound_by"] == b["bound_by"]
    assert out.count("-bound") == 1 and bottleneck_line(b) in out
    # stdout is the summary, once; summary.txt begins with it; stderr repeats none of it
    assert out.splitlines() == summary_lines(stats)
    assert (tmp_path / "o" / "summary.txt").read_text().startswith(out)
    for line in out.splitlines():
        assert line not in err
    # human units, the stats.json value under its documented name
    assert out.splitlines()[0].startswith(f"total {fmt_time(stats['total_ns'])} = ")
    assert f"roofline fraction {stats['roofline_fraction']:.3f} (Σ per-layer" in out
    r = stats["llm"]["roofline"]
    assert f"step roofline fraction {r['fraction']:.3f} (whole-step bound / step)" in out
    assert f"peak HBM bandwidth fraction {r['hbm_bandwidth_fraction']:.3f}" in out
    total = stats["total_ns"]
    assert r["hbm_bandwidth_fraction"] == pytest.approx(r["memory_bound_ns"] / total, abs=1e-6)
    assert r["fraction"] == pytest.approx(max(r["compute_bound_ns"], r["memory_bound_ns"])
                                          / total, abs=1e-6)
    assert not re.search(r"[\d,]{5,}(\.\d+)? ns|\d mW", out)  # ≥ 1 µs is in µs/ms/s
    # the layer table: columns named as stats.json's keys, the span sum explained
    text = (tmp_path / "o" / "summary.txt").read_text()
    head = next(ln for ln in text.splitlines() if ln.startswith("layer "))
    assert head.split() == ["layer", "op_type", "ns", "estimate_ns", "busy_ns",
                            "estimate_busy_ns", "bound_ns", "roofline_fraction", "bound_by",
                            "energy", "bottleneck"]
    span_sum = sum(v["ns"] for v in stats["layers"].values())
    assert span_sum > total  # tiny-llama's layers overlap
    assert f"(Σ ns {fmt_time(span_sum)} = {span_sum / total:.1f} × total)" in text


def test_precision_from_the_qconfig_per_layer_group(tmp_path, capsys):
    q = tmp_path / "q.yaml"
    q.write_text("default: {weight: 4, activation: 8, kv: 8}\n"
                 "overrides:\n  - match: 'l0.*'\n    weight: 8\n")
    stats, out, _ = _run(tmp_path / "o", capsys, "--qconfig", str(q), "--keep-bundle")
    ir = json.loads((tmp_path / "o" / "bundle" / "ir.json").read_text())
    weighted = [n["id"] for n in ir["graph"]["nodes"]
                if n["op_type"] in ("GEMM", "QKV_PROJ", "CONV")]
    te = [n for n in ir["graph"]["nodes"]
          if n["op_type"] in ("GEMM", "QKV_PROJ", "CONV", "ATTENTION", "MATMUL")]
    att = [n for n in ir["graph"]["nodes"] if n["op_type"] in ("ATTENTION", "KV_UPDATE")]
    l0 = sorted(i for i in weighted if i.startswith("l0."))
    assert l0 and len(l0) < len(weighted)
    p = stats["precision"]
    assert p["source"] == "qconfig"
    assert p["weight"] == {"int4": len(weighted) - len(l0), "int8": len(l0)}
    assert p["activation"] == {"int8": len(te)}
    assert p["kv"] == {"int8": len(att)}
    assert sorted(p["minority_layers"]) == l0
    assert all(v == {"weight": "int8"} for v in p["minority_layers"].values())
    assert p["qconfig_file"] == "q.yaml"
    line = next(ln for ln in out.splitlines() if ln.startswith("precision"))
    assert line.startswith(f"precision (qconfig q.yaml): weights int4 "
                           f"({len(weighted) - len(l0)} layers), int8 ({len(l0)}: {l0[0]}")
    assert "activations int8; KV cache int8" in line


def test_default_precision_is_named(tmp_path, capsys):
    stats, out, _ = _run(tmp_path / "o", capsys)
    assert stats["precision"]["source"] == "defaults"
    assert "qconfig_file" not in stats["precision"]
    assert "precision (defaults): weights int8; activations int8; KV cache int8" in out


def test_a_qconfig_file_equal_to_the_defaults_is_named(tmp_path, capsys):
    """The widths came from the file the user gave, even when it says what the defaults
    say: the precision names it (it named `defaults` before)."""
    q = tmp_path / "w8a8.yaml"
    q.write_text("default: {weight: 8, activation: 8, kv: 8}\n")
    stats, out, _ = _run(tmp_path / "o", capsys, "--qconfig", str(q))
    p = stats["precision"]
    assert (p["source"], p["qconfig_file"]) == ("qconfig", "w8a8.yaml")
    assert "precision (qconfig w8a8.yaml): weights int8; activations int8; KV cache int8" in out


def _peak_macs_per_ns(bits: int) -> float:
    """The `small` preset's whole-system MAC rate at `bits`-bit operands, from its YAML:
    PEs × rows × cols × depth × throughput factor × clock (one math-fidelity pass)."""
    from kernbench.topology import load_topology

    topo = load_topology("small")
    g = topo.config.cube.pe_template.pe_gemm
    return (len(topo.pes) * g.rows * g.cols * g.depth * g.throughput_factor.get(bits, 1.0)
            * g.clock_ghz)


@pytest.mark.parametrize(("qconfig", "bits", "name"), [
    (None, 8, "int8"),
    ("default: {weight: 8, activation: 16, kv: 8}\n", 16, "16-bit"),
    ("default: {weight: fp32, activation: fp32, kv: fp32}\n", 32, "fp32")])
def test_the_step_roofline_uses_the_peak_of_the_widths_run(tmp_path, capsys, qconfig, bits,
                                                           name):
    """Every MAC of tiny-llama at the peak of its operands' width (the widest operand of
    each layer: 16-bit activations run the array at its 16-bit rate), and the summary
    names that peak."""
    extra = []
    if qconfig:
        (tmp_path / "q.yaml").write_text(qconfig)
        extra = ["--qconfig", str(tmp_path / "q.yaml")]
    stats, out, _ = _run(tmp_path / "o", capsys, *extra)
    s = stats["llm"]
    r = s["roofline"]
    assert r["peaks"] == [name]
    assert r["compute_bound_ns"] == pytest.approx(s["macs"] / _peak_macs_per_ns(bits),
                                                  abs=1e-3)
    assert f"MACs at the {name} peak, memory" in out
    assert f"(MACs per step time / {name} peak)" in out


def test_mixed_widths_sum_each_layers_macs_at_its_peak(tmp_path, capsys):
    q = tmp_path / "q.yaml"
    q.write_text("default: {weight: 8, activation: 8, kv: 8}\n"
                 "overrides:\n  - match: 'l0.*'\n    weight: fp32\n    activation: fp32\n")
    stats, out, _ = _run(tmp_path / "o", capsys, "--qconfig", str(q), "--keep-bundle")
    nodes = json.loads((tmp_path / "o" / "bundle" / "ir.json").read_text())["graph"]["nodes"]
    te = {n["id"]: n for n in nodes if n["op_type"] in ("GEMM", "QKV_PROJ", "ATTENTION")}
    want = sum(stats["layers"][lid]["macs"]
               / _peak_macs_per_ns(32 if lid.startswith("l0.") else 8) for lid in te)
    assert any(lid.startswith("l0.") for lid in te) and not all(
        lid.startswith("l0.") for lid in te)
    r = stats["llm"]["roofline"]
    assert r["peaks"] == ["int8", "fp32"]
    assert r["compute_bound_ns"] == pytest.approx(want, abs=1e-3)
    assert "MACs at the int8 and fp32 peaks, memory" in out
