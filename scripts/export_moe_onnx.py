"""Write tests/models/moe.onnx: a small random-weight mixture-of-experts block.

Built with onnx.helper (torch is not installed here; the graph is the one gpt-fast's
`MOEFeedForward` / `ConditionalFeedForward` exports to): for x [T, D],

    logits = x · W_router                       MatMul            [T, E]
    vals, idx = TopK(logits, k)                 TopK              [T, k]
    w = Softmax(vals)                           (softmax over the chosen k = Mixtral's
                                                 softmax-then-renormalise)
    W1[idx], W3[idx], W2[idx]                   Gather of experts [T, k, D, F] / [T, k, F, D]
    h = SiLU(x · W1[idx]) ⊙ (x · W3[idx])       MatMul, Sigmoid, Mul
    y_e = h · W2[idx]                           MatMul            [T, k, 1, D]
    y = x + w · y_e                             MatMul (weights [T, 1, k] · [T, k, D]), Add

Every token computes exactly its k experts (gathered weights, static shapes: no
data-dependent row counts). The router weights are scaled so that each token's k-th and
(k+1)-th logits are far apart (the script checks a margin): a quantized run then picks the
same experts as the float reference.

Run: `.venv/bin/python scripts/export_moe_onnx.py` (writes moe.onnx, moe.inputs.npz,
moe.outputs.npz with onnxruntime's outputs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent.parent / "tests" / "models"
T, D, F, E, K = 8, 32, 64, 4, 2
MIN_MARGIN = 1.0


def _init(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ascontiguousarray(a), name)


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "router": (rng.normal(0, 1.0, (D, E))).astype(np.float32),
        "w1": rng.normal(0, 0.15, (E, D, F)).astype(np.float32),
        "w3": rng.normal(0, 0.15, (E, D, F)).astype(np.float32),
        "w2": rng.normal(0, 0.15, (E, F, D)).astype(np.float32),
    }


def build(w: dict[str, np.ndarray]) -> onnx.ModelProto:
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "router"], ["logits"]),
        n("TopK", ["logits", "k"], ["vals", "idx"], axis=-1, largest=1, sorted=1),
        n("Softmax", ["vals"], ["rw"], axis=-1),
        n("Gather", ["w1", "idx"], ["w1g"], axis=0),
        n("Gather", ["w3", "idx"], ["w3g"], axis=0),
        n("Gather", ["w2", "idx"], ["w2g"], axis=0),
        n("Reshape", ["x", "shape_x4"], ["x4"]),
        n("Expand", ["x4", "shape_xk"], ["xk"]),
        n("MatMul", ["xk", "w1g"], ["h1"]),
        n("MatMul", ["xk", "w3g"], ["h3"]),
        n("Sigmoid", ["h1"], ["sg"]),
        n("Mul", ["h1", "sg"], ["silu"]),
        n("Mul", ["silu", "h3"], ["h"]),
        n("MatMul", ["h", "w2g"], ["ye4"]),
        n("Reshape", ["ye4", "shape_ye"], ["ye"]),
        n("Reshape", ["rw", "shape_rw"], ["rw3"]),
        n("MatMul", ["rw3", "ye"], ["moe3"]),
        n("Reshape", ["moe3", "shape_x"], ["moe"]),
        n("Add", ["x", "moe"], ["y"]),
    ]
    consts = [_init(k, v) for k, v in w.items()] + [
        _init("k", np.array([K], np.int64)),
        _init("shape_x4", np.array([T, 1, 1, D], np.int64)),
        _init("shape_xk", np.array([T, K, 1, D], np.int64)),
        _init("shape_ye", np.array([T, K, D], np.int64)),
        _init("shape_rw", np.array([T, 1, K], np.int64)),
        _init("shape_x", np.array([T, D], np.int64)),
    ]
    g = helper.make_graph(nodes, "moe", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [T, D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, D])],
                          consts)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9,
                          producer_name="scripts/export_moe_onnx.py")
    onnx.checker.check_model(m, full_check=True)
    return m


def margin(x: np.ndarray, router: np.ndarray) -> float:
    """The smallest gap between a token's k-th and (k+1)-th router logit."""
    s = np.sort(x.astype(np.float64) @ router, axis=1)[:, ::-1]
    return float((s[:, K - 1] - s[:, K]).min())


def main() -> None:
    import onnxruntime as ort

    x = np.random.default_rng(0).normal(size=(T, D)).astype(np.float32)
    for seed in range(100):  # the first seed whose routing has a clear margin
        w = weights(seed)
        if margin(x, w["router"]) >= MIN_MARGIN:
            break
    else:
        raise SystemExit("no seed with a routing margin")
    m = build(w)
    OUT.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(OUT / "moe.onnx"))
    sess = ort.InferenceSession(str(OUT / "moe.onnx"), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    np.savez(OUT / "moe.inputs.npz", x=x)
    np.savez(OUT / "moe.outputs.npz", y=y)
    print(f"wrote moe.onnx (weight seed {seed}, routing margin {margin(x, w['router']):.3f})")


if __name__ == "__main__":
    main()
