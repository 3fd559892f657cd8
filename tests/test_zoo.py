"""Every model in tests/zoo compiles, simulates and verifies (`kernbench run --verify
--inputs`, exit 0: outputs exact vs the interpreter and within the mode's tolerance vs
onnxruntime) on `small` and on `base`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.compiler.layer_ops import layer_op_census
from kernbench.compiler.pipeline import compile_graph, load_model
from kernbench.topology import load_topology

ZOO = Path(__file__).parent / "zoo"
MODELS = sorted(p.stem for p in ZOO.glob("*.onnx"))
#: fp16 exports (scripts/float_convert.py) → the fp32 model each was converted from
HALF = {m: m.removesuffix("_fp16") for m in MODELS if m.endswith("_fp16")}
#: IR ops of attention and batched matmuls: none may run whole on one PE (ADR-0108); the
#: census's `te_shaped` covers every TE-shaped op (GEMM, CONV, ...) besides
ATTENTION_SHAPED = frozenset({"MATMUL", "ATTENTION", "EINSUM"})
#: the embedding lookups, mask / position-id arithmetic and gathers of every LLM: tiled
#: (ADR-0707), never a whole layer on one PE
SMALL_OPS = frozenset({"EMBEDDING", "ELEMENTWISE", "GATHER", "GATHER_ND", "GATHER_ELEMENTS",
                       "CUMSUM", "ADD", "MUL"})


def _run(tmp_path: Path, capsys: pytest.CaptureFixture, model: str, topology: str) -> dict:
    out = tmp_path / "out"
    code = main(["run", str(ZOO / f"{model}.onnx"), "--topology", topology, "--out", str(out),
                 "--verify", "--inputs", str(ZOO / f"{model}.inputs.npz"), "--no-trace",
                 "--no-report"])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    return json.loads((out / "verification.json").read_text())


def test_zoo_is_complete():
    assert len(MODELS) >= 26
    for m in MODELS:
        assert (ZOO / f"{m}.inputs.npz").exists() and (ZOO / f"{m}.outputs.npz").exists(), m


@pytest.mark.parametrize("topology", ["small", "base"])
@pytest.mark.parametrize("model", MODELS)
def test_zoo_model_verifies(tmp_path, capsys, model, topology):
    v = _run(tmp_path, capsys, model, topology)
    assert v["ok"]
    refs = {c["reference"] for c in v["checks"]}
    assert refs == {"interpreter", "onnxruntime"}, refs
    assert all(c["ok"] for c in v["checks"])


@pytest.mark.parametrize("topology", ["small", "base"])
@pytest.mark.parametrize("model", MODELS)
def test_zoo_attention_and_matmuls_are_tiled(model, topology):
    """Compiled, no attention or batched matmul of the model runs as a whole-layer op, nor
    any embedding, element-wise (mask, position ids), gather or cumsum layer; and at most
    2 % of the CMDQ entries are whole-layer ops of any kind (issue 13)."""
    g, _ = load_model(ZOO / f"{model}.onnx")
    state, _ = compile_graph(g, load_topology(topology))
    census = layer_op_census(state)
    assert census.te_shaped == 0, census.by_op
    assert census.of(ATTENTION_SHAPED) == 0, census.by_op
    assert census.of(SMALL_OPS) == 0, census.by_op
    assert census.share <= 0.02, (census.entries, census.by_op)


def test_zoo_has_fp16_exports():
    assert {"gpt2_fp16", "llama_fp16", "bert_fp16"} <= set(HALF)


@pytest.mark.parametrize("topology", ["small", "base"])
@pytest.mark.parametrize("model", sorted(HALF))
def test_zoo_fp16_compiles_like_its_fp32_source(model, topology):
    """Fusions, transpose folds and tiles do not depend on the float type: an fp16 export
    has no TE-shaped whole-layer op and exactly the whole-layer ops of its fp32 source
    (and as many CMDQ entries within 5 %: fp16 tiles may be sized differently)."""
    topo = load_topology(topology)
    censuses = []
    for m in (model, HALF[model]):
        g, _ = load_model(ZOO / f"{m}.onnx")
        state, _ = compile_graph(g, topo)
        censuses.append(layer_op_census(state))
    half, full = censuses
    assert half.te_shaped == 0, half.by_op
    assert half.by_op == full.by_op
    assert abs(half.entries - full.entries) <= 0.05 * full.entries
