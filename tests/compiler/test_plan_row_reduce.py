"""The plan pass decides which norm one PE runs after adding a one-row split-K GEMM up
(`LoweringPlan.norms`, from the K parts `gemm_parts.range_tiles` cuts): checked, dumped,
carried out by the GEMM's tiles, and refused when the tiles disagree."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from types import MappingProxyType

import pytest

from kernbench.compiler.checks import InvariantError, check_plan
from kernbench.compiler.lower.values import NormAfter
from kernbench.compiler.manager import PassManager
from kernbench.compiler.pipeline import PASS_NAMES, PASSES, load_model
from kernbench.compiler.state import CompileOptions, CompileState
from kernbench.topology import load_topology

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_row_reduce import _tail  # noqa: E402

FP32 = "default: {weight: fp32, activation: fp32, kv: fp32}\n"


def _until(tmp: Path, last: str, fp32: bool = False) -> CompileState:
    _tail(tmp / "tail.onnx", 768, 3072)
    q = None
    if fp32:
        q = tmp / "q.yaml"
        q.write_text(FP32)
    g, _ = load_model(tmp / "tail.onnx", q)
    passes = PASSES[:PASS_NAMES.index(last) + 1]
    return PassManager(passes).run(CompileState(g, load_topology("base"), CompileOptions()))


def _ids(st: CompileState) -> tuple[str, str]:
    fc2 = [n.id for n in st.graph.nodes if n.op_type == "GEMM"][1]
    (norm,) = [n.id for n in st.graph.nodes if n.op_type == "LAYER_NORM"]
    return fc2, norm


def test_the_plan_row_reduces_the_norm_after_a_split_one_row_gemm(tmp_path):
    st = _until(tmp_path, "plan")
    fc2, norm = _ids(st)
    plan = st.require_lowering_plan()
    na = plan.norms[fc2]
    assert na.norm == norm and na.reduced and na.parts >= 2 and plan.fused[norm] == fc2
    assert f"    {fc2} -> {norm}, {na.parts} K part(s) a tile, row-reduced" in plan.dump()
    check_plan(st)
    # the tiles carry it out: FC2's tiles run the norm, which has no op of its own
    tiled = _until(tmp_path, "tiling")
    ops = tiled.require_tiles().ops
    assert {op.fused_into for op in ops if op.layer == norm} == {fc2}
    assert any("@rowsum" in key for key in tiled.require_memory().allocations)


def test_a_float_gemm_is_not_split_so_its_norm_runs_on_its_own(tmp_path):
    """fp32 GEMMs do not split K (partial sums would not add up exactly): the plan names
    the norm after FC2 with one part, not row-reduced, and the norm is tiled as a row op.
    A plan that row-reduces it anyway is refused by the GEMM's tiles."""
    st = _until(tmp_path, "plan", fp32=True)
    fc2, norm = _ids(st)
    plan = st.require_lowering_plan()
    assert plan.norms[fc2] == NormAfter(norm, 1, False) and norm not in plan.fused
    st.lowering_plan = dataclasses.replace(
        plan, norms=MappingProxyType({fc2: NormAfter(norm, 2, True)}),
        fused=MappingProxyType({**plan.fused, norm: fc2}))
    check_plan(st)
    tiling = [p for p in PASSES if p.name == "tiling"]
    with pytest.raises(RuntimeError, match="one PE add its row up, yet its tiles have 1 part"):
        PassManager(tiling).run(st)


def test_check_plan_refuses_a_row_reduced_norm_not_fused_into_its_gemm(tmp_path):
    st = _until(tmp_path, "plan")
    fc2, norm = _ids(st)
    plan = st.require_lowering_plan()
    st.lowering_plan = dataclasses.replace(
        plan, fused=MappingProxyType({c: p for c, p in plan.fused.items() if c != norm}))
    with pytest.raises(InvariantError, match="row-reduced .* only if it is fused into it"):
        check_plan(st)
    st.lowering_plan = dataclasses.replace(
        plan, norms=MappingProxyType({norm: NormAfter(fc2, 2, True)}))
    with pytest.raises(InvariantError, match="not a norm after that GEMM's fused step"):
        check_plan(st)
