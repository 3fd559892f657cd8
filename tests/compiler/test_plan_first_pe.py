"""On one cube the plan pass decides where each layer's tiles start (`LoweringPlan.first_pe`):
the PEs the layers before it draw, counted without tiling (`pe_draws`). Checked against a
tiling that carries the round-robin over from layer to layer (the rule the plan replaces),
refused when the tiles and the plan differ, dumped."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

from kernbench.compiler.checks import InvariantError
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.manager import PassManager
from kernbench.compiler.pipeline import PASS_NAMES, PASSES, load_model
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.ir.model import Graph, LayerIR, TensorIR
from kernbench.ir.verify import verify
from kernbench.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]
MODELS = sorted((ROOT / "models").glob("*.onnx"))
#: zoo models whose lowerings tests/models lacks: CONV, POOL, REDUCE, QLINEAR_CONV,
#: CUMSUM, SLICE, CONCAT
ZOO = [ROOT / "zoo" / f"{m}.onnx" for m in ("resnet", "mobilenet_qoperator", "bloom",
                                             "gpt_neox", "vit")]
TILING = PASSES[PASS_NAMES.index("tiling"):PASS_NAMES.index("tiling") + 1]


def _planned(g: Graph, topology: str) -> CompileState:
    st = CompileState(g, load_topology(topology), CompileOptions())
    return PassManager(PASSES[:PASS_NAMES.index("plan") + 1]).run(st)


def _carried(st: CompileState, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Each layer's first PE when the tiling pass carries the round-robin over from the
    layer before (on one cube) instead of reading the plan: the cursor's position, modulo
    the PEs, as each layer with an op of its own starts."""
    seen: dict[str, int] = {}

    def carry_over(lw: Lowering, layer: str) -> int:
        seen[layer] = lw.pes.position % lw.n_pes
        return lw.pes.position

    with monkeypatch.context() as m:
        m.setattr(Lowering, "start_layer", carry_over)
        from kernbench.compiler.lower.tile_pass import lower_graph
        lower_graph(dataclasses.replace(st, memory=st.require_memory().copy()))
    return seen


@pytest.mark.parametrize("topology", ["small", "n150", "base"])
@pytest.mark.parametrize("path", MODELS + ZOO, ids=lambda p: p.stem)
def test_the_planned_first_pes_are_where_the_carried_round_robin_starts(path, topology,
                                                                        monkeypatch):
    st = _planned(load_model(path)[0], topology)
    planned = dict(st.require_lowering_plan().first_pe)
    carried = _carried(st, monkeypatch)
    if len(st.topology.cubes) == 1:  # the counter carries over, the plan predicts it
        assert planned == carried and next(iter(planned.values())) == 0
    else:  # several cubes: every layer starts at PE 0, nothing planned
        assert planned == {} and set(carried.values()) == {0}
    PassManager(TILING).run(st)  # the tiles read the plan and `check_tiles` agrees


def _converting_gemms(contiguous_out: bool) -> CompileState:
    """Two fp16 GEMMs reading one fp32 activation: the first converts it (VE_COPY row
    blocks, `prepare_x`), the second reuses the copy. With `contiguous_out` False the
    first one's output is stored strided: it runs whole, refused before it converts
    anything, and the second converts."""
    m, k, n = 64, 128, 96
    rng = np.random.default_rng(0)
    tensors = [TensorIR(id="x", shape=[m, k], dtype="fp32", role="activation")]
    nodes = []
    for i in (1, 2):
        tensors += [TensorIR(id=f"w{i}", shape=[k, n], dtype="fp32", role="weight",
                             const=True),
                    TensorIR(id=f"y{i}", shape=[m, n], dtype="fp32")]
        nodes.append(LayerIR(id=f"fc{i}", op_type="GEMM", inputs=["x", f"w{i}"],
                             outputs=[f"y{i}"], shape={"M": m, "N": n, "K": k},
                             qbits_weight="fp16", qbits_activation="fp16"))
    g = Graph(nodes=nodes, inputs=["x"], outputs=["y1", "y2"],
              tensors={t.id: t for t in tensors}, metadata={"model_name": "convert"})
    for i in (1, 2):
        g.weights[f"w{i}"] = rng.standard_normal((k, n)).astype(np.float32)
    g.rebuild_links()
    verify(g)
    st = CompileState(g, load_topology("small"), CompileOptions())
    st = PassManager(PASSES[:PASS_NAMES.index("memory") + 1]).run(st)
    if not contiguous_out:
        p = st.require_memory().placements["y1"]
        st.require_memory().placements["y1"] = p.view(p.shape, strides=(1, m))
    return PassManager(PASSES[PASS_NAMES.index("plan"):PASS_NAMES.index("plan") + 1]).run(st)


@pytest.mark.parametrize("contiguous_out", [True, False])
def test_the_conversion_of_an_activation_is_counted_once_where_it_happens(contiguous_out,
                                                                          monkeypatch):
    st = _converting_gemms(contiguous_out)
    planned = dict(st.require_lowering_plan().first_pe)
    assert planned == _carried(st, monkeypatch)
    tg = PassManager(TILING).run(st).require_tiles()
    copies = {layer: sum(o.opcode == "VE_COPY_TILE" for o in tg.ops if o.layer == layer)
              for layer in ("fc1", "fc2")}
    whole = {o.layer for o in tg.ops if o.opcode == "TE_LAYER_OP"}
    if contiguous_out:  # fc1 converts x, fc2 reads its copy
        assert copies["fc1"] > 0 and copies["fc2"] == 0 and not whole
    else:  # fc1 runs whole on one PE without converting; fc2 converts
        assert copies["fc1"] == 0 and copies["fc2"] > 0 and whole == {"fc1"}
        assert planned["fc2"] == 1


def test_the_tiles_refuse_a_plan_whose_first_pes_disagree():
    """A layer the plan gives no first PE is refused while tiling; a first PE off the
    count of the layers before it is refused by `check_tiles`."""
    st = _planned(load_model(ROOT / "models" / "gpt2.onnx")[0], "small")
    plan = st.require_lowering_plan()
    layers = list(plan.first_pe)
    missing = {k: v for k, v in plan.first_pe.items() if k != layers[3]}
    st.lowering_plan = dataclasses.replace(plan, first_pe=MappingProxyType(missing))
    with pytest.raises(RuntimeError, match=f"{layers[3]}: the lowering plan gives it no "
                                           "first PE"):
        PassManager(TILING).run(dataclasses.replace(st, memory=st.require_memory().copy()))
    off = dict(plan.first_pe)
    off[layers[3]] = (off[layers[3]] + 1) % 4
    st.lowering_plan = dataclasses.replace(plan, first_pe=MappingProxyType(off))
    with pytest.raises(InvariantError, match=f"so {layers[3]} starts on PE "
                                             f"{plan.first_pe[layers[3]]}; the lowering "
                                             f"plan says PE {off[layers[3]]}"):
        PassManager(TILING).run(st)


def test_the_plan_dump_lists_the_first_pes():
    st = _planned(load_model(ROOT / "models" / "gpt2.onnx")[0], "small")
    plan = st.require_lowering_plan()
    dump = plan.dump()
    assert "  first_pe (layer -> the PE its first tile goes to, one cube):" in dump
    for layer, pe in plan.first_pe.items():
        assert f"    {layer} -> pe{pe}\n" in dump + "\n"
