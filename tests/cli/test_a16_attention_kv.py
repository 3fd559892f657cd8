"""A16 attention (int16 Q and probabilities) blocked along the KV sequence is tiled
(issue 36, ADR-0946): the KV-block loop's TE tiles accumulate in int64 and a decode step
whose int16 cache does not fit a TCM bank no longer runs whole on one PE; the data pass
equals the interpreter (which runs the same blocks, numerics.flash) and verifies against
onnxruntime."""

from __future__ import annotations

import json

import pytest

from kernbench.cli import main


@pytest.mark.parametrize(("model", "default"), [
    ("gpt2", "{weight: 16, activation: 16, kv: 16}"),
    ("llama", "{weight: 4, activation: 16, kv: 16}"),
])
def test_a16_kv_blocked_attention_is_tiled_exactly(tmp_path, capsys, model, default):
    q = tmp_path / "q.yaml"
    q.write_text(f"default: {default}\n")
    out = tmp_path / "o"
    # 32 TCM banks of 64 KiB: 2048 int16 keys of 16 values do not fit one bank
    code = main(["run", model, "--kv-len", "2048", "--set", "cube.pe_template.pe_tcm.banks=32",
                 "--qconfig", str(q), "--verify",
                 "--quiet", "--keep-bundle", "--no-report", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert "whole-layer ops" not in err
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    assert not [e for e in cmdq if e["opcode"] == "TE_LAYER_OP"]
    att = [e for e in cmdq if (e.get("layer_id") or "").startswith("attention")]
    blocks = [e for e in att if e["opcode"] == "VE_SOFTMAX_BLOCK_TILE"]
    assert len(blocks) >= 2 * len({e["pe"] for e in blocks}), len(blocks)
    te = [e for e in att if e["opcode"] == "TE_GEMM_TILE"]
    assert te and all(e["qbits_activation"] == 16 and e["int16"] and e["ofm_qbits"] == 64
                      for e in te)
    v = json.loads((out / "verification.json").read_text())
    checks = {c["reference"]: c for c in v["checks"]}
    assert v["ok"] and set(checks) == {"interpreter", "onnxruntime"}, v["checks"]
    assert all(c["max_abs_err"] == 0.0 for c in v["checks"] if c["reference"] == "interpreter")
