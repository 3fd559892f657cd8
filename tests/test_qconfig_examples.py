"""The QConfig examples users copy (examples/qconfig/*.yaml, docs/quantization.md) load,
mean what their comments say on a real model, and one of them runs and verifies end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.ir.onnx_import import import_onnx
from kernbench.ir.qconfig import apply_qconfig, load_qconfig, unmatched_overrides

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "qconfig"
GPT2 = ROOT / "tests" / "models" / "gpt2.onnx"

#: example -> (weight, activation, kv) bits of a GEMM outside the first block, and of
#: its KV (IR values: an int, "fp16" / "bf16", None for fp32)
EXPECTED = {
    "w8a8.yaml": (8, 8, 8),
    "w4a8.yaml": (4, 8, 8),
    "w4a16_kv8.yaml": (4, 16, 8),
    "fp16.yaml": ("fp16", "fp16", "fp16"),
    "bf16.yaml": ("bf16", "bf16", "bf16"),
}


def test_every_example_is_listed():
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_sets_the_widths_it_names(name):
    qc = load_qconfig(EXAMPLES / name)
    g = import_onnx(str(GPT2))
    assert unmatched_overrides(g, qc) == []
    apply_qconfig(g, qc)
    w, a, kv = EXPECTED[name]
    later = [n for n in g.nodes if n.op_type == "GEMM"
             and ".h.0." not in str(n.metadata.get("layer_name"))]
    assert later and all((n.qbits_weight, n.qbits_activation) == (w, a) for n in later)
    attn = [n for n in g.nodes if n.op_type == "ATTENTION"]
    assert attn and all(n.qbits_kv == kv for n in attn)


def test_w4a8_keeps_the_first_block_at_8_bit_weights():
    g = import_onnx(str(GPT2))
    apply_qconfig(g, load_qconfig(EXAMPLES / "w4a8.yaml"))
    first = [n for n in g.nodes if n.op_type in ("GEMM", "QKV_PROJ")
             and ".h.0." in str(n.metadata.get("layer_name"))]
    assert len(first) == 4 and all(n.qbits_weight == 8 for n in first)


def test_w4a8_example_runs_and_verifies(tmp_path, capsys):
    code = main(["run", str(GPT2), "--qconfig", str(EXAMPLES / "w4a8.yaml"), "--verify",
                 "--quiet", "--no-trace", "--no-report", "--out", str(tmp_path / "out")])
    assert code == 0
