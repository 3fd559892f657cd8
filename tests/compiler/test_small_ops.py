"""Embedding lookups, mask and position-id arithmetic, constant-index gathers and cumsum
run as tiles over the PEs (ADR-0707), through the whole stack: ONNX → compile → simulate →
data pass. Each output is checked against numpy written here (the independent
reference), the run's own verification (exact vs the IR interpreter, onnxruntime within
tolerance) must pass, and no whole-layer op may be left. On `base` the outputs are spread
over the cubes, so the blocks run in four cubes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.cli import main

rng = np.random.default_rng(11)
FP32 = "default: {weight: fp32, activation: fp32, kv: fp32}\n"
B, S, V, D = 2, 40, 300, 48  # batch, tokens, vocabulary, hidden


def _save(path: Path, nodes: list, inputs: list, outputs: list[str], inits: list,
          feeds: dict[str, np.ndarray]) -> Path:
    g = helper.make_graph(nodes, "g", inputs,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                           for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    onnx.checker.check_model(m)
    onnx.save(m, path)
    np.savez(path.with_suffix(".inputs.npz"), **feeds)
    return path


def _run(tmp: Path, model: Path, topology: str) -> tuple[dict[str, np.ndarray], dict]:
    """Run with --verify (fp32); return (outputs, opcode counts)."""
    out = tmp / f"out-{topology}"
    q = tmp / "q.yaml"
    q.write_text(FP32)
    code = main(["run", str(model), "--topology", topology, "--out", str(out), "--verify",
                 "--inputs", str(model.with_suffix(".inputs.npz")), "--qconfig", str(q),
                 "--keep-bundle", "--no-trace", "--no-report"])
    assert code == 0
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and all(c["ok"] for c in v["checks"]), v
    assert {c["reference"] for c in v["checks"]} == {"interpreter", "onnxruntime"}
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    counts: dict[str, int] = {}
    for e in cmdq:
        counts[e["opcode"]] = counts.get(e["opcode"], 0) + 1
    assert "VE_LAYER_OP" not in counts and "TE_LAYER_OP" not in counts, counts
    with np.load(out / "outputs.npz") as z:
        return {k: z[k] for k in z.files}, counts


def _llm_front(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """What exporters put before the first block: the embedding, the padding / causal
    mask (cast, and, where with broadcasting) and position ids (cumsum, sub, mul, cast)."""
    table = rng.standard_normal((V, D)).astype(np.float32)
    causal = np.tril(np.ones((S, S), bool))[None, None]
    ids = rng.integers(0, V, (B, S)).astype(np.int64)  # (the host refuses others)
    mask = np.ones((B, S), np.int64)
    mask[1, :7] = 0  # left padding in the second sequence
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(causal, "causal"),
             numpy_helper.from_array(np.array([B, 1, 1, S], np.int64), "shape4"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(-1e9, np.float32), "neg"),
             numpy_helper.from_array(np.array(1, np.int64), "one")]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]),
             helper.make_node("Cast", ["mask"], ["mb"], to=TensorProto.BOOL),
             helper.make_node("Reshape", ["mb", "shape4"], ["mb4"]),
             helper.make_node("And", ["causal", "mb4"], ["keep"]),
             helper.make_node("Where", ["keep", "zero", "neg"], ["bias"]),
             helper.make_node("CumSum", ["mask", "one_axis"], ["cs"]),
             helper.make_node("Sub", ["cs", "one"], ["cs1"]),
             helper.make_node("Mul", ["cs1", "mask"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT)]
    inits.append(numpy_helper.from_array(np.array(1, np.int64), "one_axis"))
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, [B, S]),
              helper.make_tensor_value_info("mask", TensorProto.INT64, [B, S])]
    path = _save(tmp / "front.onnx", nodes, inputs, ["emb", "bias", "posf"], inits,
                 {"ids": ids, "mask": mask})
    keep = causal & mask.astype(bool)[:, None, None, :]
    want = {"emb": table[ids],
            "bias": np.where(keep, np.float32(0), np.float32(-1e9)),
            "posf": ((np.cumsum(mask, axis=1) - 1) * mask).astype(np.float32)}
    return path, want


@pytest.mark.parametrize("topology", ["small", "base"])
def test_embedding_mask_and_position_ids_are_tiled(tmp_path, topology):
    model, want = _llm_front(tmp_path)
    got, counts = _run(tmp_path, model, topology)
    for k, w in want.items():
        np.testing.assert_array_equal(got[k], w, err_msg=k)
    assert counts["DMA_GATHER_TILE"] >= 2, counts  # the token rows over several PEs
    assert counts["VE_ELEMENTWISE_TILE"] >= 5, counts  # cast, and, where, sub, mul, cast
    assert counts["VE_CUMSUM_TILE"] >= 1, counts


def _gathers(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Constant-index gathers of an activation (strided rows, a few runs, scattered
    elements) and a lookup of a constant table by data indices (RoBERTa's position ids)."""
    x = rng.standard_normal((B, S, 3, 16)).astype(np.float32)
    nd_idx = np.array([[0, 5], [1, 7], [1, 8]], np.int64)
    el_idx = rng.integers(0, S, (B, S)).astype(np.int64)
    pos_table = np.arange(100, 180, dtype=np.int64)[None]  # [1, 80]
    pos = rng.integers(0, 80, (1, S)).astype(np.int64)
    inits = [numpy_helper.from_array(np.array(1, np.int64), "k"),
             numpy_helper.from_array(nd_idx, "nd_idx"), numpy_helper.from_array(el_idx, "el_idx"),
             numpy_helper.from_array(pos_table, "pos_table"),
             numpy_helper.from_array(np.array([B, S * 48], np.int64), "flat")]
    nodes = [helper.make_node("Gather", ["x", "k"], ["g"], axis=2),
             helper.make_node("GatherND", ["x", "nd_idx"], ["gnd"]),
             helper.make_node("Reshape", ["x", "flat"], ["xf"]),
             helper.make_node("GatherElements", ["xf", "el_idx"], ["ge"], axis=1),
             helper.make_node("GatherElements", ["pos_table", "pos"], ["pe"], axis=1),
             helper.make_node("Cast", ["pe"], ["pef"], to=TensorProto.FLOAT)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
              helper.make_tensor_value_info("pos", TensorProto.INT64, [1, S])]
    path = _save(tmp / "gathers.onnx", nodes, inputs, ["g", "gnd", "ge", "pef"], inits,
                 {"x": x, "pos": pos})
    xf = x.reshape(B, -1)
    want = {"g": x[:, :, 1, :], "gnd": x[nd_idx[:, 0], nd_idx[:, 1]],
            "ge": np.take_along_axis(xf, el_idx, axis=1),
            "pef": pos_table[0, pos[0]][None].astype(np.float32)}
    return path, want


@pytest.mark.parametrize("topology", ["small", "base"])
def test_constant_index_gathers_are_dma_moves(tmp_path, topology):
    model, want = _gathers(tmp_path)
    got, counts = _run(tmp_path, model, topology)
    for k, w in want.items():
        np.testing.assert_array_equal(got[k], w, err_msg=k)
    # the scattered GatherElements and the position lookup are indexed DMA gathers; the
    # strided Gather and the GatherND are plain DMAs: no engine computes but for the cast
    assert counts["DMA_GATHER_TILE"] >= 2, counts
    assert {k for k in counts if k.startswith(("VE_", "TE_"))} == {"VE_ELEMENTWISE_TILE"}
