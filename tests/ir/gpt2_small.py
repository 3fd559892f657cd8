"""A GPT-2-small-shaped ONNX graph (12 layers, d=768, 12 heads, seq 128) built with
onnx.helper in the exporter's style, for measuring import / interpreter speed:

    .venv/bin/python tests/ir/gpt2_small.py      # prints import and run times
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(n_layer: int = 12, d: int = 768, heads: int = 12, seq: int = 128,
          vocab: int = 2048) -> onnx.ModelProto:  # fmt: skip
    rng = np.random.default_rng(0)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def c(name: str, a) -> str:
        inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def w(name: str, shape) -> str:
        return c(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    hd = d // heads
    c("shape2", np.array([seq, d], np.int64))
    c("shape3", np.array([1, seq, d], np.int64))
    c("shape4", np.array([1, seq, heads, hd], np.int64))
    c("scale", np.array(1 / math.sqrt(math.sqrt(hd)), np.float32))
    mask = np.triu(np.full((seq, seq), -np.inf, np.float32), 1)[None, None]
    c("mask", mask)
    for k, v in {"half": 0.5, "one": 1.0, "three": 3.0, "k0": 0.044715,
                 "k1": math.sqrt(2 / math.pi)}.items():  # fmt: skip
        c(k, np.array(v, np.float32))
    nodes.append(helper.make_node("Gather", [w("wte", (vocab, d)), "ids"], ["h0"]))
    h = "h0"
    for i in range(n_layer):
        p = f"l{i}."

        def n(op, ins, outs, **kw):
            nodes.append(helper.make_node(op, ins, outs, **kw))
            return outs[0]

        ln = n("LayerNormalization", [h, c(p + "g1", np.ones(d, np.float32)),
                                      c(p + "b1", np.zeros(d, np.float32))], [p + "ln1"])  # fmt: skip
        x2 = n("Reshape", [ln, "shape2"], [p + "x2"])
        qkv = n("Gemm", [x2, w(p + "wqkv", (d, 3 * d)), w(p + "bqkv", (3 * d,))], [p + "qkv"])
        qkv3 = n("Reshape", [qkv, c(p + "s3", np.array([1, seq, 3 * d], np.int64))], [p + "qkv3"])
        n("Split", [qkv3], [p + "q", p + "k", p + "v"], axis=2, num_outputs=3)
        t = {}
        for nm in "qkv":
            r = n("Reshape", [p + nm, "shape4"], [p + nm + "4"])
            t[nm] = n("Transpose", [r], [p + nm + "t"], perm=[0, 2, 1, 3])
        kt = n("Transpose", [t["k"]], [p + "kT"], perm=[0, 1, 3, 2])
        qs = n("Mul", [t["q"], "scale"], [p + "qs"])
        ks = n("Mul", [kt, "scale"], [p + "ks"])
        s = n("MatMul", [qs, ks], [p + "s"])
        sm = n("Softmax", [n("Add", [s, "mask"], [p + "sm_in"])], [p + "p"], axis=-1)
        ctx = n("MatMul", [sm, t["v"]], [p + "ctx"])
        ctx = n("Transpose", [ctx], [p + "ctxT"], perm=[0, 2, 1, 3])
        ctx = n("Reshape", [ctx, "shape2"], [p + "ctx2"])
        o = n("Gemm", [ctx, w(p + "wo", (d, d)), w(p + "bo", (d,))], [p + "o"])
        h = n("Add", [h, n("Reshape", [o, "shape3"], [p + "o3"])], [p + "h1"])
        ln = n("LayerNormalization", [h, c(p + "g2", np.ones(d, np.float32)),
                                      c(p + "b2", np.zeros(d, np.float32))], [p + "ln2"])  # fmt: skip
        f = n("Gemm", [n("Reshape", [ln, "shape2"], [p + "x3"]), w(p + "wfc", (d, 4 * d)),
                       w(p + "bfc", (4 * d,))], [p + "fc"])  # fmt: skip
        f = n("Reshape", [f, c(p + "s4", np.array([1, seq, 4 * d], np.int64))], [p + "fc3"])
        cube = n("Mul", [n("Pow", [f, "three"], [p + "pw"]), "k0"], [p + "cube"])
        inner = n("Mul", [n("Add", [f, cube], [p + "in0"]), "k1"], [p + "in1"])
        g = n("Mul", [n("Mul", [f, "half"], [p + "hx"]),
                      n("Add", [n("Tanh", [inner], [p + "th"]), "one"], [p + "th1"])], [p + "gelu"])  # fmt: skip
        pr = n("Gemm", [n("Reshape", [g, c(p + "s5", np.array([seq, 4 * d], np.int64))], [p + "gx"]),
                        w(p + "wpr", (4 * d, d)), w(p + "bpr", (d,))], [p + "pr"])  # fmt: skip
        h = n("Add", [h, n("Reshape", [pr, "shape3"], [p + "pr3"])], [p + "h2"])
    nodes.append(helper.make_node("LayerNormalization", [h, c("gf", np.ones(d, np.float32)),
                                                         c("bf", np.zeros(d, np.float32))], ["out"]))  # fmt: skip
    g = helper.make_graph(nodes, "gpt2_small",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, seq])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, seq, d])],
                          inits)  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def main() -> None:
    from kernbench.ir.interpreter import run
    from kernbench.ir.onnx_import import import_onnx
    from kernbench.ir.qconfig import QConfig

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gpt2_small.onnx"
        onnx.save(build(), str(path))
        ids = np.random.default_rng(0).integers(0, 2048, (1, 128)).astype(np.int64)
        t = time.perf_counter()
        g = import_onnx(path)
        t_imp = time.perf_counter() - t
        t = time.perf_counter()
        g.save(Path(tmp) / "ir.json")
        t_save = time.perf_counter() - t
        import onnxruntime as ort

        ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
            None, {"ids": ids})[0]  # fmt: skip
        t = time.perf_counter()
        out_q = run(g, {"ids": ids})["out"]
        t_q = time.perf_counter() - t
        g32 = import_onnx(path, QConfig.fp32())
        t = time.perf_counter()
        out_f = run(g32, {"ids": ids})["out"]
        t_f = time.perf_counter() - t
        cos = float(np.sum(out_q * ref) / np.linalg.norm(out_q) / np.linalg.norm(ref))
        print(f"layers {len(g.nodes)}; import {t_imp:.2f} s, save {t_save:.2f} s, "
              f"run W8A8 {t_q:.2f} s (cos {cos:.5f}), run fp32 {t_f:.2f} s "
              f"(max abs err {np.max(np.abs(out_f - ref)):.2e})", file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
