"""Tiny IR graphs built by hand for the compiler pass tests, and a way to run the passes
up to a given one."""

from __future__ import annotations

import numpy as np

from kernbench.compiler.manager import PassManager
from kernbench.compiler.pipeline import PASS_NAMES, PASSES
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.ir.model import Graph, LayerIR, TensorIR
from kernbench.ir.verify import verify
from kernbench.topology import load_topology


def _graph(tensors: list[TensorIR], nodes: list[LayerIR], inputs: list[str],
           outputs: list[str], weights: dict[str, np.ndarray]) -> Graph:
    g = Graph(nodes=nodes, inputs=inputs, outputs=outputs,
              tensors={t.id: t for t in tensors}, metadata={"model_name": "tiny"})
    g.weights.update(weights)
    g.rebuild_links()
    verify(g)
    return g


def gemm_graph(m: int = 64, k: int = 128, n: int = 96, *, gelu: bool = False,
               bits: int | None = 8, seed: int = 0,
               y_output: bool = False) -> tuple[Graph, dict[str, np.ndarray]]:
    """y = x · w + b (one GEMM, A8W8 unless bits is None: fp32), optionally z = GELU(y)
    (fused into the GEMM's epilogue unless `y_output` makes y a graph output too).
    Returns the graph and calibration inputs."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.1
    b = rng.standard_normal((n,)).astype(np.float32)
    tensors = [TensorIR(id="x", shape=[m, k], dtype="fp32", role="activation"),
               TensorIR(id="w", shape=[k, n], dtype="fp32", role="weight", const=True),
               TensorIR(id="b", shape=[n], dtype="fp32", role="weight", const=True),
               TensorIR(id="y", shape=[m, n], dtype="fp32")]
    nodes = [LayerIR(id="fc", op_type="GEMM", inputs=["x", "w", "b"], outputs=["y"],
                     shape={"M": m, "N": n, "K": k}, qbits_weight=bits,
                     qbits_activation=bits)]
    out = "y"
    if gelu:
        tensors.append(TensorIR(id="z", shape=[m, n], dtype="fp32"))
        nodes.append(LayerIR(id="act", op_type="GELU", inputs=["y"], outputs=["z"]))
        out = "z"
    outs = [out, "y"] if y_output and out != "y" else [out]
    g = _graph(tensors, nodes, ["x"], outs, {"w": w, "b": b})
    return g, {"x": rng.standard_normal((m, k)).astype(np.float32)}


def attention_graph(b: int = 1, s: int = 8, hq: int = 2, hkv: int = 1, d: int = 16, *,
                    seed: int = 0) -> tuple[Graph, dict[str, np.ndarray]]:
    """Causal integer attention (GQA: hq query heads share hkv KV heads) whose inputs come
    from (B, S, H, D) tensors through head transposes and whose output goes back through
    one: the layout a PyTorch export has."""
    rng = np.random.default_rng(seed)
    tensors, nodes, feeds = [], [], {}
    for name, h in (("q", hq), ("k", hkv), ("v", hkv)):
        tensors += [TensorIR(id=f"{name}_in", shape=[b, s, h, d], dtype="fp32"),
                    TensorIR(id=name, shape=[b, h, s, d], dtype="fp32")]
        nodes.append(LayerIR(id=f"t_{name}", op_type="TRANSPOSE", inputs=[f"{name}_in"],
                             outputs=[name], attributes={"perm": [0, 2, 1, 3]}))
        feeds[f"{name}_in"] = rng.standard_normal((b, s, h, d)).astype(np.float32)
    tensors += [TensorIR(id="o", shape=[b, hq, s, d], dtype="fp32"),
                TensorIR(id="y", shape=[b, s, hq, d], dtype="fp32")]
    nodes.append(LayerIR(id="attn", op_type="ATTENTION", inputs=["q", "k", "v"],
                         outputs=["o"], qbits_activation=8, qbits_kv=8,
                         attributes={"num_heads": hq, "num_kv_heads": hkv, "head_dim": d,
                                     "scale": 1.0 / np.sqrt(d), "causal": True}))
    nodes.append(LayerIR(id="t_o", op_type="TRANSPOSE", inputs=["o"], outputs=["y"],
                         attributes={"perm": [0, 2, 1, 3]}))
    g = _graph(tensors, nodes, ["q_in", "k_in", "v_in"], ["y"], {})
    return g, feeds


def compile_until(g: Graph, feeds: dict[str, np.ndarray], last: str,
                  topology: str = "small") -> CompileState:
    """Run the compiler's passes on `g` up to and including pass `last` (checked)."""
    passes = PASSES[:PASS_NAMES.index(last) + 1]
    state = CompileState(g, load_topology(topology), CompileOptions(calib_inputs=feeds))
    return PassManager(passes).run(state)
