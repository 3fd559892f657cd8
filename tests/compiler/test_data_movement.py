"""RoPE, transposes, slices, splits and concats run tiled over the PEs (strided DMA copies,
VE_TRANSPOSE_TILE, VE_ROPE_TILE), never as whole-layer ops, through the whole stack: ONNX →
compile → simulate → data pass. Each output is checked exactly against the IR interpreter
(--verify), within fp32's tolerance against onnxruntime, and against numpy computed here
from the inputs (the independent reference)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.cli import main
from kernbench.compiler.layer_ops import layer_op_census
from kernbench.compiler.pipeline import compile_graph, load_model
from kernbench.topology import load_topology

FP32 = "default: {weight: fp32, activation: fp32, kv: fp32}\n"
#: a 64 KiB TCM of 8 KiB banks: long rows are cut into chunks, big blocks into several
TIGHT = ["--set", "cube.pe_template.pe_tcm.capacity_kib=64",
         "--set", "cube.pe_template.pe_tcm.reserved_kib=8"]


def _i64(name: str, v: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(v, np.int64), name)


def _save(path: Path, x: np.ndarray, nodes: list, outputs: list[str], inits: list) -> Path:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(x.shape))], [helper.make_tensor_value_info(
            o, TensorProto.FLOAT, None) for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    m = onnx.shape_inference.infer_shapes(m)
    onnx.checker.check_model(m)
    onnx.save(m, path)
    np.savez(path.with_suffix(".inputs.npz"), x=x)
    return path


def _run(tmp: Path, model: Path, extra: list[str] = ()) -> tuple[dict, dict, dict]:
    """Run with --verify (fp32 mode); (verification.json, opcode counts, outputs)."""
    out = tmp / "out"
    q = tmp / "q.yaml"
    q.write_text(FP32)
    argv = ["run", str(model), "--out", str(out), "--verify", "--inputs",
            str(model.with_suffix(".inputs.npz")), "--keep-bundle", "--no-trace",
            "--no-report", "--qconfig", str(q), *extra]
    assert main(argv) == 0
    counts: dict[str, int] = {}
    for e in json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]:
        counts[e["opcode"]] = counts.get(e["opcode"], 0) + 1
    with np.load(out / "outputs.npz") as f:
        outs = {k: f[k] for k in f.files}
    return json.loads((out / "verification.json").read_text()), counts, outs


def _check(v: dict, counts: dict) -> None:
    assert "VE_LAYER_OP" not in counts and "TE_LAYER_OP" not in counts, counts
    assert v["ok"], v
    interp = [c for c in v["checks"] if c["reference"] == "interpreter"]
    assert interp and all(c["ok"] and c["max_abs_err"] == 0.0 for c in interp), interp


def _layout_model(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Transposes (head swap, innermost axis moved, K-style (0, 2, 3, 1), (2, 0, 1, 3)),
    a stepped slice with a negative start, an uneven split, a concat with a constant."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 12, 6, 10)).astype(np.float32)
    c = rng.standard_normal((2, 12, 6, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t_heads"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["x"], ["t_inner"], perm=[0, 1, 3, 2]),
        helper.make_node("Transpose", ["x"], ["t_k"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["x"], ["t_outer"], perm=[2, 0, 1, 3]),
        helper.make_node("Slice", ["x", "s0", "s1", "s_ax", "s_st"], ["sl"]),
        helper.make_node("Split", ["x", "sp"], ["sp0", "sp1", "sp2"], axis=3),
        helper.make_node("Concat", ["x", "c"], ["cat"], axis=3),
        helper.make_node("Concat", ["t_heads", "t_heads"], ["cat1"], axis=1),
    ]
    inits = [_i64("s0", [-10, 1]), _i64("s1", [12, 6]), _i64("s_ax", [1, 2]),
             _i64("s_st", [2, 3]), _i64("sp", [3, 5, 2]), numpy_helper.from_array(c, "c")]
    outs = ["t_heads", "t_inner", "t_k", "t_outer", "sl", "sp0", "sp1", "sp2", "cat", "cat1"]
    th = x.transpose(0, 2, 1, 3)
    want = {"t_heads": th, "t_inner": x.transpose(0, 1, 3, 2),
            "t_k": x.transpose(0, 2, 3, 1), "t_outer": x.transpose(2, 0, 1, 3),
            "sl": x[:, 2:12:2, 1:6:3], "sp0": x[..., :3], "sp1": x[..., 3:8],
            "sp2": x[..., 8:], "cat": np.concatenate([x, c], 3),
            "cat1": np.concatenate([th, th], 1)}
    return _save(tmp / "layout.onnx", x, nodes, outs, inits), want


@pytest.mark.parametrize("extra", [[], ["--topology", "base"], TIGHT],
                         ids=["small", "base", "tight_tcm"])
def test_transpose_slice_split_concat_are_tiled_copies(tmp_path, extra):
    model, want = _layout_model(tmp_path)
    v, counts, outs = _run(tmp_path, model, extra)
    _check(v, counts)
    ort = [c for c in v["checks"] if c["reference"] == "onnxruntime"]
    assert ort and all(c["ok"] for c in ort), ort
    for k, w in want.items():
        np.testing.assert_array_equal(outs[k], w, err_msg=k)  # a copy moves exact bytes
    assert counts["VE_TRANSPOSE_TILE"] >= 2, counts  # t_inner and t_k move the last axis
    assert counts["DMA_LOAD_TILE"] >= counts["DMA_STORE_TILE"] > 10, counts


def _rope_nodes(x: str, y: str, d: int, p: str) -> list:
    """HF's rotate-half RoPE on the last axis (width d) of `x`: x·cos + rot(x)·sin."""
    return [
        helper.make_node("Slice", [x, f"{p}z", f"{p}h", f"{p}ax"], [f"{p}x1"]),
        helper.make_node("Slice", [x, f"{p}h", f"{p}d", f"{p}ax"], [f"{p}x2"]),
        helper.make_node("Neg", [f"{p}x2"], [f"{p}nx2"]),
        helper.make_node("Concat", [f"{p}nx2", f"{p}x1"], [f"{p}rot"], axis=-1),
        helper.make_node("Mul", [f"{p}rot", f"{p}sin"], [f"{p}rs"]),
        helper.make_node("Mul", [x, f"{p}cos"], [f"{p}xc"]),
        helper.make_node("Add", [f"{p}xc", f"{p}rs"], [y]),
    ]


def _tables(s: int, d: int, p: str) -> tuple[list, np.ndarray, np.ndarray]:
    inv = 1.0 / (10000 ** (np.arange(0, d, 2, dtype=np.float32) / d))
    f = np.outer(np.arange(s, dtype=np.float32), inv)
    emb = np.concatenate([f, f], -1)[None, None]
    cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
    inits = [numpy_helper.from_array(cos, f"{p}cos"), numpy_helper.from_array(sin, f"{p}sin"),
             _i64(f"{p}z", [0]), _i64(f"{p}h", [d // 2]), _i64(f"{p}d", [d]),
             _i64(f"{p}ax", [3])]
    return inits, cos, sin


def _np_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    h = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., h:], x[..., :h]], -1) * sin


def _rope_model(tmp: Path, s: int, heads: int, d: int,
                rot: int) -> tuple[Path, dict[str, np.ndarray]]:
    """(1, S, H·D) → heads (1, H, S, D) → RoPE on the first `rot` of D (partial rotary:
    Slice → RoPE → Concat with the rest, as GPT-NeoX / Phi / StableLM export it)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, s, heads * d)).astype(np.float32)
    inits, cos, sin = _tables(s, rot, "r_")
    inits += [_i64("shape4", [1, s, heads, d]), _i64("z", [0]), _i64("rot", [rot]),
              _i64("dd", [d]), _i64("ax", [3])]
    nodes = [helper.make_node("Reshape", ["x", "shape4"], ["x4"]),
             helper.make_node("Transpose", ["x4"], ["xh"], perm=[0, 2, 1, 3])]
    xh = x.reshape(1, s, heads, d).transpose(0, 2, 1, 3)
    if rot == d:
        nodes += _rope_nodes("xh", "y", d, "r_")
        want = _np_rope(xh, cos, sin)
    else:
        nodes += [helper.make_node("Slice", ["xh", "z", "rot", "ax"], ["xr"]),
                  helper.make_node("Slice", ["xh", "rot", "dd", "ax"], ["xp"]),
                  *_rope_nodes("xr", "yr", rot, "r_"),
                  helper.make_node("Concat", ["yr", "xp"], ["y"], axis=3)]
        want = np.concatenate([_np_rope(xh[..., :rot], cos, sin), xh[..., rot:]], -1)
    return _save(tmp / "rope.onnx", x, nodes, ["y"], inits), {"y": want}


@pytest.mark.parametrize("topology", ["small", "base"])
@pytest.mark.parametrize("rot", [16, 4], ids=["full", "partial"])
def test_rope_is_tiled_and_matches_numpy(tmp_path, topology, rot):
    model, want = _rope_model(tmp_path, 24, 4, 16, rot)
    v, counts, outs = _run(tmp_path, model, ["--topology", topology])
    _check(v, counts)
    np.testing.assert_allclose(outs["y"], want["y"], rtol=1e-6, atol=1e-6)
    assert counts["VE_ROPE_TILE"] >= 4, counts  # rows spread over the PEs


ZOO = Path(__file__).resolve().parents[1] / "zoo"
#: zoo models whose RoPE, head transposes, slices, splits and concats used to run whole
FIXED = ["llama", "llama_decode", "mistral", "qwen2", "qwen2_decode", "qwen3", "gemma2",
         "phi3", "stablelm", "gpt_neox", "falcon", "vit", "whisper_encoder",
         "gpt2_qdq_static", "bert_qdq_static"]
MOVES = frozenset({"ROPE", "TRANSPOSE", "SLICE", "SPLIT", "CONCAT"})


@pytest.mark.parametrize("topology", ["small", "base"])
@pytest.mark.parametrize("model", FIXED)
def test_zoo_rope_and_data_movement_are_tiled(model, topology):
    g, _ = load_model(ZOO / f"{model}.onnx")
    state, _ = compile_graph(g, load_topology(topology))
    census = layer_op_census(state)
    assert census.of(MOVES) == 0, census.by_op
