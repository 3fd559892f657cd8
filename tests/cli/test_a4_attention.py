"""A4 attention (4-bit Q and probabilities) is tiled (issue 36, ADR-0947): Q is quantized
into packed int4, each row block's probabilities get a per-row scale at 4 bits (row max
/ 7), the TE tiles read `qbits_activation: 4`; unblocked and blocked along the KV
sequence, no whole-layer op is left and the data pass equals the interpreter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main

MODELS = Path(__file__).resolve().parents[2] / "tests" / "models"


def _run(tmp_path: Path, args: list[str], default: str) -> tuple[int, dict, list[dict]]:
    q = tmp_path / "q.yaml"
    q.write_text(f"default: {default}\n")
    out = tmp_path / "o"
    code = main(["run", *args, "--qconfig", str(q), "--verify", "--quiet", "--keep-bundle",
                 "--no-report", "--out", str(out)])
    v = json.loads((out / "verification.json").read_text()) if code == 0 else {}
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"] if code == 0 else []
    return code, v, cmdq


@pytest.mark.parametrize(("args", "default", "blocked"), [
    (["tests/models/gpt2.onnx", "--inputs", "tests/models/gpt2.inputs.npz"],
     "{weight: 8, activation: 4, kv: 8}", False),
    (["tests/models/llama.onnx", "--inputs", "tests/models/llama.inputs.npz"],
     "{weight: 4, activation: 4, kv: 4}", False),
    # a decode step whose 4097 int8 keys do not fit a 64 KiB bank: the KV-block loop
    (["llama", "--kv-len", "4096", "--set", "cube.pe_template.pe_tcm.banks=32"],
     "{weight: 8, activation: 4, kv: 8}", True),
])
def test_a4_attention_is_tiled_exactly(tmp_path, capsys, monkeypatch, args, default,
                                       blocked):
    monkeypatch.chdir(MODELS.parents[1])
    code, v, cmdq = _run(tmp_path, args, default)
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert "whole-layer ops" not in err
    assert not [e for e in cmdq if e["opcode"] in ("TE_LAYER_OP", "VE_LAYER_OP")]
    att = [e for e in cmdq if (e.get("layer_id") or "").startswith("attention")]
    te = [e for e in att if e["opcode"] == "TE_GEMM_TILE"]
    assert te and all(e["qbits_activation"] == 4 for e in te)
    # the online softmax may be chained into a VE_FUSED_TILE; the merge is not
    assert any(e["opcode"] == "VE_ATTN_MERGE_TILE" for e in att) == blocked
    checks = v["checks"]
    assert v["ok"] and {c["reference"] for c in checks} == {"interpreter", "onnxruntime"}
    assert all(c["max_abs_err"] == 0.0 for c in checks if c["reference"] == "interpreter")
