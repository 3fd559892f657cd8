"""A whole-layer TE op carries its operands' widths and is priced by them (ADR-0804):
before, every TE_LAYER_OP was timed as 8-bit, whatever its fp16 / fp32 / 16-bit data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.cmdq.io import parse_program
from kernbench.components.builtin.pe_gemm import gemm_cycles
from kernbench.topology import load_topology

MODELS = Path(__file__).resolve().parents[1] / "models"


def _layer_ops(tmp_path: Path, default: str, model: str = "llama") -> list[dict]:
    q = tmp_path / "q.yaml"
    q.write_text(f"default: {default}\n")
    b = tmp_path / "b"
    assert main(["compile", str(MODELS / f"{model}.onnx"), "--qconfig", str(q), "-o", str(b),
                 "--quiet"]) == 0
    cmdq = json.loads((b / "cmdq.json").read_text())["cmdq"]
    return [e for e in cmdq if e["opcode"] == "TE_LAYER_OP"]


@pytest.mark.parametrize(("model", "default", "widths"), [
    # still whole: A4 GEMMs with W16; a decode attention with 16-bit float activations
    # reading an int4 KV cache (its "weight" is K / V at 4 bits); fp16 attention, A4
    # GEMMs with W8 (ADR-0915), A4 attention (ADR-0947), fp16 weights with A8
    # (ADR-0948), integer weights with float activations and float attention on an
    # int8 / int16 KV cache (ADR-0986) are tiled
    ("llama", "{weight: 16, activation: 4, kv: 8}", {(16, 4)}),
    ("llama_decode", "{weight: 8, activation: fp16, kv: 4}", {(4, 16)}),
    ("llama_decode", "{weight: 4, activation: bf16, kv: 4}", {(4, 16)}),
])
def test_whole_layer_te_ops_carry_their_widths(tmp_path, model, default, widths):
    ops = _layer_ops(tmp_path, default, model)
    assert ops
    prog = parse_program({"cmdq": [dict(e, id=i) for i, e in enumerate(ops)]
                          + [{"opcode": "END", "id": len(ops)}]})
    got = {(e.qbits_weight, e.qbits_activation) for e in prog.cmdq[:-1]}
    assert got == widths


def test_the_array_prices_a_layer_op_at_its_widths():
    """The GEMM stage of a TE_LAYER_OP hands its widths to pe_gemm, whose cycles follow
    the array's throughput factor at those bits."""
    from kernbench.cmdq.schema import TeLayerOp

    e = TeLayerOp(id=0, layer_id="x", in_bytes=64, out_bytes=64, m=64, n=64, k=256,
                  qbits_weight=32, qbits_activation=16)
    _, p = e.compute_stage(0, 1)
    assert (p["qbits_weight"], p["qbits_activation"]) == (32, 16)
    spec = load_topology("small").config.cube.pe_template.pe_gemm
    # the default array: fp32 at a quarter, 4-bit at twice the 8-bit rate
    assert gemm_cycles(spec, 64, 64, 256, 32) == 4 * gemm_cycles(spec, 64, 64, 256, 8)
    assert gemm_cycles(spec, 64, 64, 256, 4) < gemm_cycles(spec, 64, 64, 256, 8)
