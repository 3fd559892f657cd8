"""Widths the tiles did not take are tiled like the others (issue 36, ADR-0915): bf16 and
fp16 GEMMs, QKV projections and attentions run as TE_GEMM_TILEs with 16-bit float
operands and fp32 accumulators, A16 attention in int16 / int64, A4 GEMMs on packed int4
activations, not whole on one PE (TE_LAYER_OP), and verify against the interpreter and
onnxruntime within their documented tolerances."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "models"
QCONFIGS = ROOT / "examples" / "qconfig"


def _run(tmp_path: Path, model: str, qconfig: Path) -> tuple[int, dict, list[dict]]:
    out = tmp_path / "o"
    code = main(["run", str(MODELS / f"{model}.onnx"), "--qconfig", str(qconfig), "--verify",
                 "--quiet", "--keep-bundle", "--inputs", str(MODELS / f"{model}.inputs.npz"),
                 "--out", str(out)])
    checks = {}
    if (out / "verification.json").is_file():
        v = json.loads((out / "verification.json").read_text())
        checks = {c["reference"]: c for c in v["checks"]}
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    return code, checks, cmdq


@pytest.mark.parametrize("model", ["gpt2", "llama"])
@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_float_gemms_are_tiled_and_verify(tmp_path, capsys, model, fmt):
    code, c, cmdq = _run(tmp_path, model, QCONFIGS / f"{fmt}.yaml")
    assert code == 0, capsys.readouterr().err[-2000:]
    assert c["interpreter"]["ok"] and c["onnxruntime"]["ok"], c
    whole = {e["layer_id"] for e in cmdq if e["opcode"] == "TE_LAYER_OP"}
    assert not whole, whole
    te = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE"]
    gemm = [e for e in te if e["layer_id"].startswith(("gemm", "qkv"))]
    assert gemm and all(e["qbits_weight"] == 16 and e["qbits_activation"] == 16
                        and e["ofm_qbits"] == 32 and not e.get("int16") for e in gemm)
    # the TE reads the format the QConfig names (fp16 is the field's default)
    assert all(e.get("f16_format", "fp16") == fmt for e in gemm)
    # attention: Q·Kᵀ reads Q and K at the format, P·V fp32 probabilities and V at it
    att = [e for e in te if e["layer_id"].startswith("attention")]
    qk = [e for e in att if e.get("transpose_wgt")]
    pv = [e for e in att if not e.get("transpose_wgt")]
    assert qk and len(qk) == len(pv)
    assert all(e["qbits_activation"] == e["qbits_weight"] == 16 for e in qk)
    assert all(e["qbits_activation"] == 32 and e["qbits_weight"] == 16 for e in pv)
    assert all(e.get("f16_format", "fp16") == fmt for e in att)


@pytest.mark.parametrize(("model", "default"), [
    ("gpt2", "{weight: 16, activation: 16, kv: 16}"),
    ("llama", "{weight: 8, activation: 16, kv: 8}"),
    ("llama", "{weight: 4, activation: 16, kv: 4}"),
])
def test_a16_attention_is_tiled_exactly(tmp_path, capsys, model, default):
    """ATTENTION with 16-bit integer activations ran whole (ADR-0800); its Q·Kᵀ and P·V
    tiles now read int16 Q / P and accumulate in int64, equal to the interpreter."""
    q = tmp_path / "q.yaml"
    q.write_text(f"default: {default}\n")
    code, c, cmdq = _run(tmp_path, model, q)
    assert code == 0, capsys.readouterr().err[-2000:]
    assert c["interpreter"]["max_abs_err"] == 0.0 and c["onnxruntime"]["ok"], c
    assert not [e for e in cmdq if e["opcode"] == "TE_LAYER_OP"]
    att = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE"
           and e["layer_id"].startswith("attention")]
    assert att and all(e["qbits_activation"] == 16 and e.get("int16")
                       and e["ofm_qbits"] == 64 for e in att)


@pytest.mark.parametrize(("model", "default"), [
    ("gpt2", "{weight: 8, activation: 4, kv: 8}"),
    ("llama", "{weight: 4, activation: 4, kv: 4}"),
])
def test_a4_gemms_are_tiled_exactly(tmp_path, capsys, model, default):
    """GEMMs with 4-bit activations ran whole: the activation is now quantized into a
    packed int4 scratch and the TE tiles read 4-bit operands, equal to the interpreter."""
    q = tmp_path / "q.yaml"
    q.write_text(f"default: {default}\n")
    code, c, cmdq = _run(tmp_path, model, q)
    assert code == 0, capsys.readouterr().err[-2000:]
    assert c["interpreter"]["max_abs_err"] == 0.0 and c["onnxruntime"]["ok"], c
    whole = {e["layer_id"].split("_")[0] for e in cmdq if e["opcode"] == "TE_LAYER_OP"}
    assert not whole, whole  # A4 attention is tiled too (ADR-0947)
    gemm = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE"
            and e["layer_id"].startswith(("gemm", "qkv"))]
    assert gemm and all(e["qbits_activation"] == 4 for e in gemm)
