"""Tensor-parallel graphs (compiler.parallel.shard_graph): what each rank keeps of every
weight, the heads it attends, where the collectives go, and the refusals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from kernbench.compiler.parallel import shard_graph
from kernbench.compiler.pipeline import load_model
from kernbench.errors import InputError
from kernbench.ir.interpreter import Interpreter
from kernbench.models.hf_config import load_hf_config
from kernbench.models.llm_graph import LlmShape, build_llm_graph

MODELS = Path(__file__).resolve().parents[1] / "models"
CONFIGS = Path(__file__).resolve().parents[1] / "hf_configs"


def _llama():
    return load_model(MODELS / "llama.onnx")[0]


def test_each_rank_keeps_its_block_of_heads_and_columns() -> None:
    g = _llama()
    n = 2
    qkv = next(x for x in g.nodes if x.op_type == "QKV_PROJ")
    for r in range(n):
        tg = shard_graph(g, n, r)
        s = tg.graph
        q2 = s.node(qkv.id)
        assert q2.attributes["num_heads"] == qkv.attributes["num_heads"] // n
        assert q2.attributes["num_kv_heads"] == qkv.attributes["num_kv_heads"] // n
        for w_full, w_rank in zip(qkv.inputs[1:], q2.inputs[1:], strict=True):
            full = np.asarray(g.weights[w_full])
            k = full.shape[1] // n
            np.testing.assert_array_equal(s.weights[w_rank], full[:, r * k:(r + 1) * k])
        # every row-parallel GEMM keeps its block of rows, and an all-reduce follows it
        for site in tg.sites:
            if site.op != "all_reduce":
                continue
            gemm = s.node(s.tensors[site.src].producer)
            orig = g.node(gemm.id)
            full = np.asarray(g.weights[orig.inputs[1]])
            k = full.shape[0] // n
            np.testing.assert_array_equal(s.weights[gemm.inputs[1]], full[r * k:(r + 1) * k])
    # 2 layers × (attention output + MLP down) all-reduced, and the LM head gathered
    ops = [x.op for x in shard_graph(g, n, 0).sites]
    assert ops == ["all_reduce"] * 4 + ["all_gather"]


def test_partial_sums_of_the_ranks_add_up_to_the_unsplit_layer() -> None:
    """The interpreter on each rank's graph: the partial outputs of the first row-parallel
    GEMM summed over the ranks equal the unsplit model's output of that GEMM."""
    g = _llama()
    ids = np.arange(16, dtype=np.int64).reshape(1, 16) % 200
    _, ref = Interpreter(g, quantize=False).run({"input_ids": ids}, keep_all=True)
    total = None
    site = None
    for r in range(2):
        tg = shard_graph(g, 2, r)
        site = tg.sites[0]
        _, vals = Interpreter(tg.graph, quantize=False).run({"input_ids": ids},
                                                           keep_all=True)
        part = vals[site.src].astype(np.float64)
        total = part if total is None else total + part
    assert site is not None and total is not None
    np.testing.assert_allclose(total, ref[site.dst], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("n", "needle"), [
    (3, "attention heads 4 does not split into 3"),
    (4, "KV heads 2 does not split into 4"),
])
def test_a_split_that_does_not_divide_names_the_value(n: int, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        shard_graph(_llama(), n, 0)


def test_shape_only_intermediate_not_divisible_is_refused() -> None:
    a = load_hf_config(CONFIGS / "tiny-llama.json")
    assert a.n_kv_heads % 2 == 0
    odd = dataclasses.replace(a, ffn=2 * (a.ffn // 2) + 1)  # heads split in 2, the MLP not
    g = build_llm_graph(odd, LlmShape(batch=1, seq_len=1, kv_len=8))
    with pytest.raises(InputError, match=f"intermediate size {odd.ffn} does not split"):
        shard_graph(g, 2, 0)


def test_shape_only_kv_cache_is_split_by_head() -> None:
    a = load_hf_config(CONFIGS / "tiny-llama.json")
    g = build_llm_graph(a, LlmShape(batch=2, seq_len=1, kv_len=8))
    tg = shard_graph(g, 2, 1)
    past = [t for t in g.inputs if t.startswith("past.")]
    assert past and set(tg.split_inputs) == set(past)
    for t in past:
        assert tg.graph.tensors[t].shape[1] == g.tensors[t].shape[1] // 2
