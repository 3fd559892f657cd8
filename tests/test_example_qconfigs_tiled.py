"""Every example QConfig (examples/qconfig/*.yaml) compiles gpt2 and llama, prefill and
decode (tests/models), with no whole-layer op (TE_LAYER_OP / VE_LAYER_OP): a width the
examples show is a width the compiler tiles (issue 36). Compile only: the data of each
width is checked by its own test (tests/cli/test_width_tiles.py, test_float_attention_kv,
test_a16_attention_kv, test_a4_attention, test_mixed_width_gemms)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernbench.compiler.layer_ops import layer_op_census
from kernbench.compiler.pipeline import compile_graph, load_model
from kernbench.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "qconfig").glob("*.yaml"))
MODELS = ("gpt2", "llama", "gpt2_decode", "llama_decode")


def test_there_are_examples():
    assert len(EXAMPLES) >= 7, EXAMPLES


@pytest.mark.parametrize("qconfig", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_qconfig_tiles_every_layer(qconfig):
    topo = load_topology("small")
    for model in MODELS:
        g, _ = load_model(ROOT / "tests" / "models" / f"{model}.onnx", qconfig)
        state, _ = compile_graph(g, topo)
        c = layer_op_census(state)
        assert c.total == 0, (model, c.by_op, c.layers)
