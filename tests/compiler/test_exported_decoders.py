"""What decoder exports of torch and Optimum write around the blocks maps onto tiles, never
onto a whole-layer op on one PE: the attention mask's Expand (dropped when it changes
nothing or its reader broadcasts anyway, else VE_ELEMENTWISE_TILE blocks of the identity
broadcast) and RoPE whose cos / sin are computed at run time from the position ids
(VE_ROPE_TILE, the halves proven equal by the tables' producers). Each case runs the whole
stack with --verify (exact against the IR interpreter, onnxruntime within tolerance) and
is checked against numpy written here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_small_ops import _save  # an ONNX graph and its inputs, checked and saved

from kernbench.cli import main
from kernbench.compiler.layer_ops import layer_op_census
from kernbench.compiler.pipeline import compile_graph, load_model
from kernbench.host.onnx_dims import ShapeOptions, bind_onnx_dims
from kernbench.topology import load_topology

HF = Path(__file__).resolve().parents[1] / "models" / "hf_decoders"
FP32 = "default: {weight: fp32, activation: fp32, kv: fp32}\n"
rng = np.random.default_rng(21)


def _run(tmp: Path, model: Path, topology: str) -> tuple[dict[str, np.ndarray], dict, dict]:
    """Run with --verify (fp32); (outputs, opcode counts, compiled IR op counts)."""
    out = tmp / f"out-{topology}"
    q = tmp / "q.yaml"
    q.write_text(FP32)
    assert main(["run", str(model), "--topology", topology, "--out", str(out), "--verify",
                 "--inputs", str(model.with_suffix(".inputs.npz")), "--qconfig", str(q),
                 "--keep-bundle", "--no-trace", "--no-report"]) == 0
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and {c["reference"] for c in v["checks"]} == {"interpreter", "onnxruntime"}
    assert all(c["max_abs_err"] == 0.0 for c in v["checks"] if c["reference"] == "interpreter")
    counts: dict[str, int] = {}
    for e in json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]:
        counts[e["opcode"]] = counts.get(e["opcode"], 0) + 1
    ops: dict[str, int] = {}
    for n in json.loads((out / "bundle" / "ir.json").read_text())["graph"]["nodes"]:
        ops[n["op_type"]] = ops.get(n["op_type"], 0) + 1
    with np.load(out / "outputs.npz") as z:
        return {k: z[k] for k in z.files}, counts, ops


def _i64(name: str, v: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(v, np.int64), name)


@pytest.mark.parametrize("topology", ["small", "base"])
def test_expands_are_dropped_or_tiled(tmp_path, topology):
    """A mask-like [2, 1, 1, 8] expanded four ways and a column expanded along the
    innermost axis: as a graph output and under a Softmax (tiled broadcasts), under an
    Add that broadcasts anyway and to its own shape (both dropped); rows expanded along a
    batch axis of the MatMul that reads them (a token's input per expert: dropped)."""
    x = rng.standard_normal((2, 1, 1, 8)).astype(np.float32)
    col = rng.standard_normal((2, 8, 1)).astype(np.float32)
    z = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    rows = rng.standard_normal((2, 1, 4, 8)).astype(np.float32)
    w = rng.standard_normal((2, 3, 8, 5)).astype(np.float32)
    nodes = [helper.make_node("Expand", ["x", "s_out"], ["e_out"]),
             helper.make_node("Expand", ["x", "s_heads"], ["e_heads"]),
             helper.make_node("Softmax", ["e_heads"], ["sm"], axis=-1),
             helper.make_node("Expand", ["x", "s_add"], ["e_add"]),
             helper.make_node("Add", ["e_add", "z"], ["added"]),
             helper.make_node("Expand", ["x", "s_same"], ["e_same"]),
             helper.make_node("Mul", ["e_same", "two"], ["doubled"]),
             helper.make_node("Expand", ["col", "s_col"], ["e_col"]),
             helper.make_node("Softmax", ["e_col"], ["sm_col"], axis=-1),
             helper.make_node("Expand", ["rows", "s_rows"], ["e_rows"]),
             helper.make_node("MatMul", ["e_rows", "w"], ["mm"])]
    inits = [_i64("s_out", [2, 1, 8, 8]), _i64("s_heads", [2, 4, 8, 8]),
             _i64("s_add", [2, 3, 8, 8]), _i64("s_same", [2, 1, 1, 8]),
             _i64("s_col", [2, 8, 16]), _i64("s_rows", [2, 3, 4, 8]),
             numpy_helper.from_array(z, "z"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
           helper.make_tensor_value_info("col", TensorProto.FLOAT, list(col.shape)),
           helper.make_tensor_value_info("rows", TensorProto.FLOAT, list(rows.shape)),
           helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape))]
    outs = ["e_out", "sm", "added", "doubled", "sm_col", "mm"]
    path = _save(tmp_path / "expand.onnx", nodes, ins, outs, inits,
                 {"x": x, "col": col, "rows": rows, "w": w})
    got, counts, ops = _run(tmp_path, path, topology)
    assert "VE_LAYER_OP" not in counts and "TE_LAYER_OP" not in counts, counts
    assert ops["EXPAND"] == 3, ops  # e_out, e_heads, e_col tiled; e_add, e_same, e_rows dropped
    assert counts["VE_ELEMENTWISE_TILE"] >= 3

    def softmax(a: np.ndarray) -> np.ndarray:
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    np.testing.assert_array_equal(got["e_out"], np.broadcast_to(x, (2, 1, 8, 8)))
    np.testing.assert_allclose(got["sm"], softmax(np.broadcast_to(x, (2, 4, 8, 8))),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["added"], x + z, rtol=1e-6)
    np.testing.assert_allclose(got["doubled"], x * 2, rtol=1e-6)
    np.testing.assert_allclose(got["sm_col"], np.full((2, 8, 16), 1 / 16, np.float32),
                               rtol=1e-6)
    np.testing.assert_allclose(got["mm"], rows @ w, rtol=1e-5, atol=1e-5)


def _rope_model(tmp: Path, b: int, s: int, h: int, d: int, same_halves: bool) -> tuple:
    """Llama's attention front as torch exports it: q [B, S, H·D] split into heads and
    transposed, cos / sin computed from position_ids (Unsqueeze, Cast, Mul by inv_freq,
    Concat(freqs, freqs) — or (freqs, 2·freqs) when not `same_halves` —, Cos / Sin, times
    the attention scaling, Unsqueeze(1)), rotate-half: q·cos + cat(-q2, q1)·sin."""
    half = d // 2
    inv = (1.0 / 10000 ** (np.arange(half) / half)).astype(np.float32)
    q = rng.standard_normal((b, s, h * d)).astype(np.float32)
    pos = (np.arange(s)[None] + np.arange(b)[:, None] * 3).astype(np.int64)
    second = "freqs" if same_halves else "freqs2"
    nodes = [helper.make_node("Reshape", ["q", "s_heads"], ["q4"]),
             helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
             helper.make_node("Unsqueeze", ["pos", "ax2"], ["pos3"]),
             helper.make_node("Cast", ["pos3"], ["posf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["posf", "inv"], ["freqs"]),
             helper.make_node("Mul", ["freqs", "two"], ["freqs2"]),
             helper.make_node("Concat", ["freqs", second], ["emb"], axis=-1),
             helper.make_node("Cos", ["emb"], ["cos0"]),
             helper.make_node("Mul", ["cos0", "one"], ["cos3"]),
             helper.make_node("Sin", ["emb"], ["sin0"]),
             helper.make_node("Mul", ["sin0", "one"], ["sin3"]),
             helper.make_node("Unsqueeze", ["cos3", "ax1"], ["cos"]),
             helper.make_node("Unsqueeze", ["sin3", "ax1"], ["sin"]),
             helper.make_node("Slice", ["qt", "h0", "h1", "axl"], ["x1"]),
             helper.make_node("Slice", ["qt", "h1", "hend", "axl"], ["x2"]),
             helper.make_node("Neg", ["x2"], ["nx2"]),
             helper.make_node("Concat", ["nx2", "x1"], ["rot"], axis=-1),
             helper.make_node("Mul", ["qt", "cos"], ["qc"]),
             helper.make_node("Mul", ["rot", "sin"], ["rs"]),
             helper.make_node("Add", ["qc", "rs"], ["y"])]
    inits = [_i64("s_heads", [b, s, h, d]), _i64("ax1", [1]), _i64("ax2", [2]),
             _i64("h0", [0]), _i64("h1", [half]), _i64("hend", [d]), _i64("axl", [-1]),
             numpy_helper.from_array(inv, "inv"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    ins = [helper.make_tensor_value_info("q", TensorProto.FLOAT, list(q.shape)),
           helper.make_tensor_value_info("pos", TensorProto.INT64, list(pos.shape))]
    path = _save(tmp / "rope.onnx", nodes, ins, ["y"], inits, {"q": q, "pos": pos})
    f = pos[..., None].astype(np.float32) * inv
    emb = np.concatenate([f, f if same_halves else 2 * f], -1)[:, None]
    x = q.reshape(b, s, h, d).transpose(0, 2, 1, 3)
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return path, x * np.cos(emb) + rot * np.sin(emb)


@pytest.mark.parametrize(("topology", "b", "s"), [("small", 1, 1), ("small", 2, 24),
                                                  ("base", 2, 24)])
def test_rope_with_tables_computed_from_position_ids_is_tiled(tmp_path, topology, b, s):
    path, want = _rope_model(tmp_path, b, s, 4, 16, same_halves=True)
    got, counts, ops = _run(tmp_path, path, topology)
    assert ops["ROPE"] == 1 and counts.get("VE_ROPE_TILE", 0) >= 1, (ops, counts)
    assert "VE_LAYER_OP" not in counts and "TE_LAYER_OP" not in counts, counts
    np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-5)


def test_rope_with_tables_not_proven_half_equal_runs_whole_and_says_so(tmp_path):
    """Computed tables whose halves differ (Concat(freqs, 2·freqs)): VE_ROPE_TILE's half
    rows would be wrong, so the layer runs whole, named in the census, and still computes
    the right values."""
    path, want = _rope_model(tmp_path, 1, 8, 4, 16, same_halves=False)
    got, counts, ops = _run(tmp_path, path, "small")
    assert ops["ROPE"] == 1 and counts.get("VE_ROPE_TILE", 0) == 0
    assert counts.get("VE_LAYER_OP") == 1
    np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-5)


SHAPES = [(1, 1, 16), (1, 64, 0), (2, 1, 16), (2, 8, 0)]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"b{b}s{s}kv{k}" for b, s, k in SHAPES])
@pytest.mark.parametrize("name", sorted(p.stem for p in HF.glob("*.onnx")))
def test_exported_decoders_compile_without_whole_layer_ops(tmp_path, name, shape):
    b, s, kv = shape
    bound, _ = bind_onnx_dims(HF / f"{name}.onnx", ShapeOptions(b, s, kv), tmp_path)
    g, _ = load_model(bound)
    state, _ = compile_graph(g, load_topology("small"))
    census = layer_op_census(state)
    assert census.total == 0, census.note()
