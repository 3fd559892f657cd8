"""The plan pass: the lowering plan is in the state, frozen, checked, dumped, and the
tiling pass reads its decisions instead of making them."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from test_quantized_graphs import _dynamic_model
from tiny_ir import compile_until, gemm_graph

from kernbench.cli import main
from kernbench.compiler.checks import InvariantError, check_plan, check_tiles
from kernbench.compiler.lower.context import Lowering
from kernbench.compiler.lower.plan import LoweringPlan
from kernbench.compiler.manager import PassManager
from kernbench.compiler.pipeline import PASS_NAMES, PASSES, compile_graph, load_model
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.models.builders import model_for
from kernbench.topology import load_topology


def test_plan_runs_after_memory_and_before_tiling():
    assert PASS_NAMES.index("memory") < PASS_NAMES.index("plan") < PASS_NAMES.index("tiling")


def test_plan_holds_the_gemm_weight_quantized_per_column():
    g, feeds = gemm_graph(m=16, k=32, n=24)
    st = compile_until(g, feeds, "plan")
    plan = st.require_lowering_plan()
    wp = plan.te_weight(("w", "int", 8))
    assert wp is not None and wp.bits == 8 and wp.dtype == "int8"
    w = np.asarray(g.weights["w"], np.float64)
    # independent reference: symmetric per-column int8, scale = max|w| / 127
    scale = np.abs(w).max(axis=0) / 127.0
    np.testing.assert_allclose(np.asarray(wp.scale, np.float64).reshape(-1), scale, rtol=1e-6)
    q = np.clip(np.round(w / scale), -127, 127)
    np.testing.assert_array_equal(wp.values.data.astype(np.int64), q.astype(np.int64))
    np.testing.assert_array_equal(wp.column_sums(), q.astype(np.int64).sum(axis=0))
    assert wp.placement is None  # stored by the tile that first reads it, not by the plan


def test_plan_is_frozen():
    g, feeds = gemm_graph(m=16, k=32, n=24)
    plan = compile_until(g, feeds, "plan").require_lowering_plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.read_through = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.te_weights[("w", "int", 8)] = None  # type: ignore[index]


def test_an_unplanned_weight_is_an_error_not_a_silent_recompute():
    g, feeds = gemm_graph(m=16, k=32, n=24)
    plan = compile_until(g, feeds, "plan").require_lowering_plan()
    with pytest.raises(RuntimeError, match="no TE weight planned"):
        plan.te_weight(("w", "fp16", "fp16"))


def test_tiling_needs_the_plan():
    g, feeds = gemm_graph(m=16, k=32, n=24)
    passes = [p for p in PASSES if p.name != "plan"]
    st = compile_until(g, feeds, "memory")
    with pytest.raises(RuntimeError, match="run 'plan' first"):
        PassManager(passes[passes.index(next(p for p in passes if p.name == "tiling")):]).run(st)


def test_check_plan_refuses_a_plan_naming_no_constant():
    g, feeds = gemm_graph(m=16, k=32, n=24)
    st = compile_until(g, feeds, "plan")
    plan = st.require_lowering_plan()
    st.lowering_plan = dataclasses.replace(plan, te_weights={("x", "int", 8): None})
    with pytest.raises(InvariantError, match="'x' is not a constant"):
        check_plan(st)
    st.lowering_plan = dataclasses.replace(plan, read_through={"fc": "fc"})
    with pytest.raises(InvariantError, match="not a transpose"):
        check_plan(st)


def test_dump_after_plan_lists_the_decisions(tmp_path):
    g, feeds = gemm_graph(m=16, k=32, n=24)
    st = compile_until(g, feeds, "memory")
    PassManager([p for p in PASSES if p.name == "plan"], dump_after=("plan",),
                dump_dir=tmp_path).run(st)
    text = (tmp_path / "after-plan.txt").read_text(encoding="utf-8")
    assert "lowering plan:" in text
    assert "w int w8: int8 [32, 24], 8 bits, 24 column scales" in text
    assert isinstance(st.lowering_plan, LoweringPlan)


def test_plan_names_the_tiled_dynamic_quantization_and_its_integer_gemm(tmp_path):
    """onnxruntime's quantize_dynamic chain: the plan says the DYNAMIC_QUANTIZE is tiled,
    the MATMUL_INTEGER reads it with its weight re-centered by the zero point (checked
    against numpy), and its Cast, Mul and bias Add are computed by its tiles."""
    _dynamic_model(tmp_path / "dyn.onnx", 3, 24)
    g, _ = load_model(tmp_path / "dyn.onnx")
    passes = PASSES[:PASS_NAMES.index("plan") + 1]
    st = PassManager(passes).run(CompileState(g, load_topology("small"), CompileOptions()))
    plan = st.require_lowering_plan()
    (dq,) = [n.id for n in g.nodes if n.op_type == "DYNAMIC_QUANTIZE"]
    (mi,) = [n for n in g.nodes if n.op_type == "MATMUL_INTEGER"]
    assert plan.dynamic_quantize == {dq}
    im = plan.integer_matmuls[mi.id]
    w = np.asarray(g.weights[mi.inputs[1]], np.int64)
    np.testing.assert_array_equal(im.weight.astype(np.int64), w - 3)
    # the bias Add after the Mul is the epilogue's consumer (a broadcast row of N values)
    add = plan.epilogue[mi.id]
    assert add.layer.op_type == "ADD" and add.in2_tid == "bias" and not add.in2_per_row
    assert plan.fused == {im.cast.id: mi.id, im.mul.id: mi.id, add.layer.id: mi.id}
    check_plan(st)
    text = plan.dump()
    assert f"    {dq}\n" in text and f"{im.cast.id} -> {mi.id}" in text


@pytest.mark.parametrize(("y_output", "fused"), [(False, True), (True, False)])
def test_plan_fuses_a_sole_gelu_consumer_into_the_gemm_epilogue(y_output, fused):
    """A GEMM's only consumer GELU is applied by its epilogue; when the GEMM's output is a
    graph output too, nothing is fused (the output must be stored)."""
    g, feeds = gemm_graph(m=16, k=32, n=24, gelu=True, y_output=y_output)
    plan = compile_until(g, feeds, "plan").require_lowering_plan()
    assert ("fc" in plan.epilogue) is fused
    assert plan.fused == ({"act": "fc"} if fused else {})
    if fused:
        assert plan.epilogue["fc"].layer.id == "act" and plan.epilogue["fc"].chain == ("y",)
        assert "fc -> act (GELU, stored fp32" in plan.dump()
    st = compile_until(g, feeds, "tiling")
    layers = {op.layer for op in st.require_tiles().ops if op.opcode == "VE_GELU_TILE"}
    fused_into = {op.fused_into for op in st.require_tiles().ops if op.layer == "act"}
    assert layers == {"act"} and fused_into == ({"fc"} if fused else {""})


def test_the_builder_keeps_no_cross_op_table_the_plan_owns():
    """The tables the plan (or the memory plan, or the PE cursor) took over are gone from
    the builder: a lowering cannot write a decision another op reads through them."""
    g, feeds = gemm_graph(m=16, k=32, n=24)
    lw = Lowering(compile_until(g, feeds, "plan"))
    moved = ("weights", "stored_weights", "dynamic", "lone", "fused", "unwritten", "pinned",
             "prepared", "gemm_producer", "row_reduced")
    assert [a for a in moved if hasattr(lw, a)] == []
    assert lw.lowering_plan is lw.state.lowering_plan


def test_a_fused_gemm_output_is_planned_unwritten_and_read_as_float_refused():
    """The GEMM output its epilogue's GELU consumes is in the plan's `unwritten`; the tiles
    drop its storage, after which a float read of it is refused, not served from a stale
    placement."""
    g, feeds = gemm_graph(m=16, k=32, n=24, gelu=True)
    st = compile_until(g, feeds, "tiling")
    plan = st.require_lowering_plan()
    assert plan.unwritten == {"y"} and "    y" in plan.dump().split("unwritten")[1]
    assert "y" not in st.require_memory().placements
    with pytest.raises(RuntimeError, match="stored only quantized, yet read as float"):
        Lowering(st).placement("y")
    check_tiles(st)
    # tiles that kept the storage the plan leaves unwritten disagree with it
    st.require_memory().placements["y"] = st.require_memory().placements["z"]
    with pytest.raises(InvariantError, match="leaves y unwritten, yet it kept its storage"):
        check_tiles(st)


def test_plan_names_the_transposes_a_qdq_writes_through(tmp_path):
    """llama_qdq: the QDQ after P·V writes its rows through the head transpose that
    follows it. The plan names each such transpose (checked against the graph: a
    (0, 2, 1, 3) TRANSPOSE reading the QDQ's output); the tiles give it no operation and
    the QDQ's stores write the transpose's output."""
    from pathlib import Path

    model = Path(__file__).resolve().parents[1] / "models" / "llama_qdq.onnx"
    g, _ = load_model(model)
    st, _ = compile_graph(g, load_topology("small"))
    plan = st.require_lowering_plan()
    assert plan.written_through
    ops = st.require_tiles().ops
    for t, q in plan.written_through.items():
        tn, qn = g.node(t), g.node(q)
        assert tn.op_type == "TRANSPOSE" and list(tn.attributes["perm"]) == [0, 2, 1, 3]
        assert qn.op_type == "QDQ" and tn.inputs[0] == qn.outputs[0]
        assert plan.computed_elsewhere(t) and not [op for op in ops if op.layer == t]
        out_key = st.require_memory().placements[tn.outputs[0]].key
        assert any(k == out_key for op in ops if op.layer == q for k, *_ in op.hbm_writes)
        assert f"{t} -> {q}" in plan.dump()
    check_plan(st)
    bad = dataclasses.replace(plan, written_through={next(iter(plan.written_through)): "x"})
    st.lowering_plan = bad
    with pytest.raises(InvariantError, match="writes through"):
        check_plan(st)


@pytest.mark.parametrize(("seq", "kv", "section"), [(1, 64, "kv_rows"), (64, 0, "kv_stores")])
def test_projections_store_kv_rows_in_decode_and_int8_kv_in_prefill(tmp_path, seq, kv,
                                                                     section):
    """GPT-2 on small: a decode step's K / V projections store their new rows into the
    present caches (each naming its KV_UPDATE), a prefill's store int8 K / V for the
    tiled attention; the other table is empty. Read from `--dump-after plan`."""
    args = ["compile", "gpt2", "--seq-len", str(seq), "--kv-len", str(kv), "-t", "small",
            "--dump-after", "plan", "--out", str(tmp_path / "b")]
    assert main(args) == 0
    text = (tmp_path / "after-plan.txt").read_text(encoding="utf-8")
    tables: dict[str, list[str]] = {}
    name = ""
    for line in text.splitlines():
        if line.startswith("  ") and not line.startswith("    "):
            name = line.split()[0]
            tables[name] = []
        elif line.startswith("    ") and name:
            tables[name].append(line.strip())
    other = "kv_stores" if section == "kv_rows" else "kv_rows"
    assert len(tables[section]) == 4 and tables[other] == []  # K and V of 2 layers
    if section == "kv_rows":
        assert all("-> kv_update_" in e and "scale" in e for e in tables[section])
    else:
        assert all(e.endswith("float not stored)") for e in tables[section])


def test_producers_store_the_activations_the_plan_names_quantized(tmp_path):
    """GPT-2 prefill on small (A8W8): the plan has the LayerNorm, GELU and attention
    outputs the integer GEMMs read stored as int8 by their producers too, each float
    store dropped (only the GEMMs read them); the tiles agree: each scratch is written,
    and by no GEMM that reads it (none quantizes it again)."""
    path = tmp_path / "gpt2.onnx"
    onnx.save(model_for("gpt2", seq_len=64), str(path))
    g, _ = load_model(path)
    st, _ = compile_graph(g, load_topology("small"))
    plan = st.require_lowering_plan()
    producers = {g.node(g.tensors[t].producer).op_type for t in plan.quant_stores}
    assert producers == {"LAYER_NORM", "GELU", "ATTENTION"}, producers
    ops = st.require_tiles().ops
    for tid, qs in plan.quant_stores.items():
        assert qs.bits == 8 and qs.unread and qs.unread[0] == tid
        # the float and its views are planned unwritten; the views are computed by the
        # producer's tiles and lose their storage
        assert set(qs.unread) <= plan.unwritten
        for v in qs.unread[1:]:
            assert plan.fused[g.tensors[v].producer] == g.tensors[tid].producer
            assert v not in st.require_memory().placements
        assert plan.quant_stored(qs.read_as) is qs
        key = f"{qs.read_as}@int8"
        writers = {op.layer for op in ops for k, *_ in op.hbm_writes if k == key}
        assert writers and not writers & set(g.tensors[qs.read_as].consumers), (tid, writers)
