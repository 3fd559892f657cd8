"""QOperator layers (QLinearMatMul, QLinearConv; ADR-0709) run as tiles through the whole
stack: ONNX → compile → simulate → data pass. Single-node graphs with uint8 and int8
activations, non-zero zero points, per-tensor and per-channel weight scales / zero points;
a tight TCM forces K steps and row blocks. Checked: no whole-layer op, the data pass
exactly equal to the interpreter, onnxruntime within the qoperator tolerance, and the
interpreter's numerics exactly equal to a plain numpy int64 formula written here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.cli import main
from kernbench.numerics import linalg

TIGHT = ["--set", "cube.pe_template.pe_tcm.capacity_kib=64",
         "--set", "cube.pe_template.pe_tcm.reserved_kib=8"]
TP = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def _ints(rng: np.random.Generator, dt: type, shape: tuple) -> np.ndarray:
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, shape).astype(dt)


def _save(path: Path, node: onnx.NodeProto, x: np.ndarray, y_shape: list[int],
          inits: dict[str, np.ndarray]) -> Path:
    dt = TP[x.dtype.type]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(node.input[0], dt,
                                                                      list(x.shape))],
                          [helper.make_tensor_value_info("y", dt, y_shape)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=9)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    np.savez(path.with_suffix(".inputs.npz"), **{node.input[0]: x})
    return path


def _requant(acc: np.ndarray, mult: np.ndarray, zy: np.ndarray) -> np.ndarray:
    """Plain requantization: rint(float32(acc)·m) + zy, saturated to zy's type."""
    info = np.iinfo(zy.dtype)
    y = np.rint(acc.astype(np.float32) * mult.astype(np.float32)).astype(np.int64) + int(zy)
    return np.clip(y, info.min, info.max).astype(zy.dtype)


def _run(tmp: Path, model: Path) -> tuple[dict, dict[str, int], list[dict]]:
    out = tmp / "out"
    code = main(["run", str(model), "--out", str(out), "--verify", "--inputs",
                 str(model.with_suffix(".inputs.npz")), "--keep-bundle", "--no-trace",
                 "--no-report", "--quiet", *TIGHT])
    assert code == 0
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    counts: dict[str, int] = {}
    for e in cmdq:
        counts[e["opcode"]] = counts.get(e["opcode"], 0) + 1
    return json.loads((out / "verification.json").read_text()), counts, cmdq


def _check(v: dict, counts: dict[str, int]) -> None:
    assert "TE_LAYER_OP" not in counts and "VE_LAYER_OP" not in counts, counts
    assert counts.get("VE_REQUANTIZE_TILE"), counts
    assert v["ok"], v
    interp = [c for c in v["checks"] if c["reference"] == "interpreter"]
    ort = [c for c in v["checks"] if c["reference"] == "onnxruntime"]
    assert interp and all(c["ok"] and c["max_abs_err"] == 0.0 for c in interp), interp
    assert ort and all(c["ok"] for c in ort), ort


MATMUL_CASES = {  # name: (activation type, per-column weight, rows, K, N)
    "u8_per_column": (np.uint8, True, (2, 24), 300, 96),
    "i8_per_tensor": (np.int8, False, (40,), 72, 40),
    "u8_per_tensor_many_k": (np.uint8, False, (3, 8), 520, 24),
}


@pytest.mark.parametrize("case", sorted(MATMUL_CASES))
def test_qlinear_matmul_runs_tiled_and_exact(tmp_path, case):
    dt, per_col, rows, k, n = MATMUL_CASES[case]
    rng = np.random.default_rng(len(case))
    zero = np.zeros((), dt)
    za = np.asarray(131 if dt is np.uint8 else -7, dt)
    b = rng.integers(-100, 100, (k, n)).astype(np.int8)
    sb = (rng.random(n) * 0.01 + 0.001).astype(np.float32) if per_col else np.float32(0.004)
    zb = rng.integers(-5, 5, n).astype(np.int8) if per_col else np.asarray(3, np.int8)
    sa, sy = np.float32(0.02), np.float32(0.9 + 0.1 * len(rows))
    zy = np.asarray(120 if dt is np.uint8 else 5, dt)
    x = _ints(rng, dt, (*rows, k))
    inits = {"sa": sa, "za": za, "b": b, "sb": sb, "zb": zb, "sy": sy, "zy": zy}
    node = helper.make_node("QLinearMatMul", ["a", *inits], ["y"])
    model = _save(tmp_path / "qmm.onnx", node, x, [*rows, n], inits)
    # the interpreter's numerics against a plain numpy formula
    acc = (x.astype(np.int64) - int(za)) @ (b.astype(np.int64) - zb.astype(np.int64))
    want = _requant(acc, (sa * sb) / sy, zy)
    got = linalg.qlinear_matmul(x, sa, za, b, sb, zb, sy, zy)
    assert got.dtype == zero.dtype and np.array_equal(got, want)
    v, counts, cmdq = _run(tmp_path, model)
    _check(v, counts)
    gemms = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE"]
    assert len(gemms) > 1
    if k > 500:  # several K steps (accumulating tiles) in the tight TCM
        assert any(e.get("accumulate") for e in gemms)
    assert all(e.get("ifm_signed", True) is (dt is np.int8) for e in gemms)
    # the zero-point column term rides on the first K step of each tile only
    assert all(("bias_bank" in e) == (not e.get("accumulate")) for e in gemms)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_matmul_of_two_activations_runs_tiled_and_exact(tmp_path, dt):
    """Attention-shaped (batched, broadcast over heads): the operands are centered on
    the VE into fp16 and multiplied exactly (qlinear_bmm)."""
    rng = np.random.default_rng(11)
    za, zb = np.asarray(131 if dt is np.uint8 else -7, dt), np.asarray(9, dt)
    zy = np.asarray(120 if dt is np.uint8 else 5, dt)
    sa, sb, sy = np.float32(0.02), np.float32(0.03), np.float32(0.5)
    a, b = _ints(rng, dt, (2, 3, 20, 48)), _ints(rng, dt, (2, 1, 48, 36))
    inits = {"sa": sa, "za": za, "sb": sb, "zb": zb, "sy": sy, "zy": zy}
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                            ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TP[dt], a.shape),
                                        helper.make_tensor_value_info("b", TP[dt], b.shape)],
                          [helper.make_tensor_value_info("y", TP[dt], [2, 3, 20, 36])],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    path = tmp_path / "qbmm.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=9),
              path)
    np.savez(path.with_suffix(".inputs.npz"), a=a, b=b)
    acc = (a.astype(np.int64) - int(za)) @ (b.astype(np.int64) - int(zb))
    want = _requant(acc, (sa * sb) / sy, zy)
    assert np.array_equal(linalg.qlinear_matmul(a, sa, za, b, sb, zb, sy, zy), want)
    v, counts, _ = _run(tmp_path, path)
    _check(v, counts)
    assert counts.get("TE_GEMM_TILE", 0) >= 6  # at least one block per batch index


def _conv_ref(x, zx, w, zw, bias, strides, pads, group):  # noqa: ANN001, ANN202
    """int64 conv of (x - zx) and (w - zw[o]), by explicit loops over the window."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.full((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]), int(zx), np.int64)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    xc = xp - int(zx)
    wc = w.astype(np.int64) - np.asarray(zw, np.int64).reshape(-1, 1, 1, 1)
    ho = (xp.shape[2] - kh) // strides[0] + 1
    wo = (xp.shape[3] - kw) // strides[1] + 1
    acc = np.zeros((n, o, ho, wo), np.int64)
    og = o // group
    for oc in range(o):
        g0 = (oc // og) * cg
        for i in range(kh):
            for j in range(kw):
                win = xc[:, g0:g0 + cg, i:i + strides[0] * ho:strides[0],
                         j:j + strides[1] * wo:strides[1]]
                acc[:, oc] += np.einsum("nchw,c->nhw", win, wc[oc, :, i, j])
    if bias is not None:
        acc += bias.astype(np.int64).reshape(1, -1, 1, 1)
    return acc


CONV_CASES = {  # name: (type, per-channel, c_in, c_out, hw, k, stride, pads, group, bias)
    "u8_per_channel_3x3": (np.uint8, True, 24, 40, (14, 12), 3, 1, [1, 1, 1, 1], 1, True),
    "i8_per_tensor_stride2_asym": (np.int8, False, 8, 12, (9, 8), 3, 2, [1, 0, 0, 1], 1,
                                   False),
    "u8_grouped": (np.uint8, True, 8, 8, (6, 6), 3, 1, [1, 1, 1, 1], 2, True),
    "u8_depthwise": (np.uint8, True, 16, 16, (10, 10), 3, 2, [1, 1, 1, 1], 16, True),
    "i8_1x1": (np.int8, True, 16, 24, (12, 12), 1, 1, [0, 0, 0, 0], 1, True),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_qlinear_conv_runs_tiled_and_exact(tmp_path, case):
    dt, per_ch, c, o, hw, k, s, pads, group, has_bias = CONV_CASES[case]
    rng = np.random.default_rng(len(case) + 100)
    w = rng.integers(-90, 90, (o, c // group, k, k)).astype(np.int8)
    sw = (rng.random(o) * 0.01 + 0.001).astype(np.float32) if per_ch else np.float32(0.004)
    zw = rng.integers(-4, 4, o).astype(np.int8) if per_ch else np.asarray(2, np.int8)
    zx = np.asarray(140 if dt is np.uint8 else -9, dt)
    zy = np.asarray(100 if dt is np.uint8 else 3, dt)
    sx, sy = np.float32(0.02), np.float32(0.05 * k * k)
    inits = {"sx": sx, "zx": zx, "w": w, "sw": sw, "zw": zw, "sy": sy, "zy": zy}
    bias = rng.integers(-3000, 3000, o).astype(np.int32) if has_bias else None
    if has_bias:
        inits["bias"] = bias
    node = helper.make_node("QLinearConv", ["x", *inits], ["y"], kernel_shape=[k, k],
                            pads=pads, strides=[s, s], group=group)
    x = _ints(rng, dt, (1, c, *hw))
    acc = _conv_ref(x, zx, w, zw, bias, [s, s], pads, group)
    want = _requant(acc, ((sx * sw) / sy).reshape(-1, 1, 1) if per_ch else (sx * sw) / sy, zy)
    got = linalg.qlinear_conv(x, sx, zx, w, sw, zw, sy, zy, bias, strides=[s, s], pads=pads,
                              dilations=[1, 1], group=group)
    assert np.array_equal(got, want)
    model = _save(tmp_path / "qconv.onnx", node, x, list(want.shape), inits)
    v, counts, cmdq = _run(tmp_path, model)
    _check(v, counts)
    tiles = [e for e in cmdq if e["opcode"] in ("TE_CONV_TILE", "VE_DWCONV_TILE")]
    assert tiles and (len(tiles) > 1 or hw[0] < 10)  # bigger layers spread over the PEs
    assert all(e.get("pad_value") == int(zx) for e in tiles if any(pads))


def test_conv_integer_imports_and_matches_numpy(tmp_path):
    """ConvInteger (int32 out) imports and runs (whole layer, ADR-0709) exactly."""
    rng = np.random.default_rng(3)
    x = _ints(rng, np.uint8, (1, 4, 6, 6))
    w = rng.integers(-60, 60, (8, 4, 3, 3)).astype(np.int8)
    inits = {"w": w, "zx": np.asarray(17, np.uint8), "zw": np.asarray(2, np.int8)}
    node = helper.make_node("ConvInteger", ["x", "w", "zx", "zw"], ["y"], kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8,
                                                                      [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 8, 6, 6])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    path = tmp_path / "ci.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=9),
              path)
    np.savez(path.with_suffix(".inputs.npz"), x=x)
    want = _conv_ref(x, inits["zx"], w, np.full(8, 2), None, [1, 1], [1, 1, 1, 1], 1)
    got = linalg.conv_integer(x, w, inits["zx"], inits["zw"], strides=[1, 1],
                              pads=[1, 1, 1, 1], dilations=[1, 1])
    assert got.dtype == np.int32 and np.array_equal(got, want)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--verify", "--inputs",
                 str(path.with_suffix(".inputs.npz")), "--no-trace", "--no-report",
                 "--quiet"]) == 0
    checks = json.loads((out / "verification.json").read_text())["checks"]
    assert checks and all(c["ok"] and c["max_abs_err"] == 0.0 for c in checks)


ZOO = Path(__file__).resolve().parents[1] / "zoo"
QOPERATOR_ZOO = ["bert_qoperator", "mobilenet_qoperator", "resnet_qoperator"]


@pytest.mark.parametrize("topology", ["small", "base"])
@pytest.mark.parametrize("model", QOPERATOR_ZOO)
def test_qoperator_zoo_compiles_to_tiles(model, topology):
    """onnxruntime's QOperator exports (scripts/export_zoo.py): every QLinear layer and the
    Quantize / DequantizeLinear around them compile to tiles; ≤ 2% of CMDQ entries are
    whole-layer ops (bert's embedding, gathers and mask)."""
    from kernbench.compiler.layer_ops import layer_op_census
    from kernbench.compiler.pipeline import compile_graph, load_model
    from kernbench.topology import load_topology

    g, _ = load_model(ZOO / f"{model}.onnx")
    qlinear = [n.id for n in g.nodes if n.op_type in ("QLINEAR_CONV", "QLINEAR_MATMUL")]
    assert qlinear
    state, _ = compile_graph(g, load_topology(topology))
    census = layer_op_census(state)
    assert census.te_shaped == 0, census.by_op
    assert not {op for _, op in census.by_op} & {"QUANTIZE", "DEQUANTIZE"}, census.by_op
    assert census.share <= 0.02, census.by_op
    requant = {o.layer for o in state.tiles.ops if o.opcode == "VE_REQUANTIZE_TILE"}
    assert requant == set(qlinear)  # each QLinear layer ends in its requantize epilogue
