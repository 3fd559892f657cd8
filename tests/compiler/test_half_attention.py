"""fp16 / bf16 attention blocked along a long KV sequence (ADR-0304, ADR-0704): Q, K, V and
the output stay 16-bit in HBM, the tiles quantize them from their stored width and round
the merged output once (VE_COPY). `run --verify` is exact against the interpreter; fp16
is also within the A8KV8 tolerance of onnxruntime (bf16: onnxruntime has no kernels)."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from kernbench.cli import main

#: a 64 KiB TCM (8 KiB banks): 600 keys × 16 × 4 bytes do not fit one bank
SMALL_TCM = ["--set", "cube.pe_template.pe_tcm.capacity_kib=64",
             "--set", "cube.pe_template.pe_tcm.reserved_kib=16"]
TYPES = {"fp16": (TensorProto.FLOAT16, np.float16), "bf16": (TensorProto.BFLOAT16,
                                                            ml_dtypes.bfloat16)}


def _attention_model(tmp_path: Path, to: str, s: int = 8, t: int = 600, d: int = 16) -> Path:
    code, npt = TYPES[to]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "sc"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    sc = helper.make_tensor("sc", code, [], np.asarray(0.25, npt).tobytes(), raw=True)
    g = helper.make_graph(
        nodes, "att", [helper.make_tensor_value_info(x, code, [1, 4, n, d])
                       for x, n in (("q", s), ("k", t), ("v", t))],
        [helper.make_tensor_value_info("o", code, [1, 4, s, d])], [sc])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    onnx.save(m, tmp_path / f"att_{to}.onnx")
    return tmp_path / f"att_{to}.onnx"


@pytest.mark.parametrize("to", ["fp16", "bf16"])
def test_long_half_attention_is_blocked_and_exact(tmp_path, capsys, to):
    model = _attention_model(tmp_path, to)
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal((1, 4, n, 16)).astype(np.float32)
             for x, n in (("q", 8), ("k", 600), ("v", 600))}
    inputs = tmp_path / "in.npz"
    if to == "fp16":
        np.savez(inputs, **{k: v.astype(np.float16) for k, v in feeds.items()})
    else:  # npz has no bfloat16: fp32 values that bf16 holds exactly, cast on load
        np.savez(inputs, **{k: v.astype(ml_dtypes.bfloat16).astype(np.float32)
                            for k, v in feeds.items()})
    out = tmp_path / "out"
    code = main(["run", str(model), "--inputs", str(inputs), "--verify", "--keep-bundle",
                 *SMALL_TCM, "--out", str(out), "--no-trace", "--no-report", "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    refs = {c["reference"]: c for c in v["checks"]}
    assert v["ok"] and refs["interpreter"]["max_abs_err"] == 0.0
    assert set(refs) == ({"interpreter", "onnxruntime"} if to == "fp16" else {"interpreter"})
    ops = [e["opcode"] for e in json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]]
    assert ops.count("VE_SOFTMAX_BLOCK_TILE") > 4  # blocked along the 600 keys
    assert "TE_LAYER_OP" not in ops and "VE_LAYER_OP" not in ops
    assert ops.count("VE_COPY_TILE") == 4  # one rounding of each head's merged output
