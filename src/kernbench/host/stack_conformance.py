"""onnx's single-node test cases through the WHOLE stack: each case's model is imported
(fp32 mode), compiled to CMDQ, simulated (pass 1) and executed by the data pass (pass 2);
the outputs read back from simulated HBM are compared with the case's expected outputs at
the case's own tolerances. `kernbench.ir.conformance` runs the same cases through the IR
reference interpreter only; this module measures the path a user actually takes.

Used by scripts/onnx_conformance.py (which writes the counts into docs/onnx-support.md) and
by tests/test_stack_conformance.py (which keeps the count from dropping).
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernbench.cmdq.io import load_program
from kernbench.compiler.pipeline import compile_graph, write_bundle
from kernbench.compiler.state import CompileOptions
from kernbench.errors import InputError
from kernbench.host.bundle import Bundle, run_with_data
from kernbench.ir.backend import bind_index_inputs
from kernbench.ir.conformance import CaseResult, check_outputs, claimed_ops, collect, reason_of
from kernbench.ir.onnx_import import import_model_proto
from kernbench.ir.qconfig import QConfig
from kernbench.topology import load_topology


@dataclass(frozen=True)
class StackCase:
    """One single-node case: its op, name, model and (inputs, expected) data sets."""

    op: str
    name: str
    model: object
    data_sets: list
    rtol: float
    atol: float


def stack_cases(cases: list | None = None) -> list[StackCase]:
    ops = set(claimed_ops())
    out = []
    for tc in collect() if cases is None else cases:
        nodes = tc.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in ops and nodes[0].domain in ("", "ai.onnx"):
            out.append(StackCase(nodes[0].op_type, tc.name, tc.model, tc.data_sets or [],
                                 tc.rtol, tc.atol))
    return sorted(out, key=lambda c: (c.op, c.name))


def run_case(case: StackCase, topology: object) -> CaseResult:
    """Compile, simulate and data-pass one case on `topology`; compare every data set."""

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"), \
                tempfile.TemporaryDirectory() as tmp:
            warnings.simplefilter("ignore")
            for inputs, expected in case.data_sets:
                graph, feeds = _import(case.model, inputs)
                opts = CompileOptions(calib_inputs=feeds)
                state, _ = compile_graph(graph, topology, opts)
                bundle_dir = Path(tmp) / "bundle"
                write_bundle(state, bundle_dir)
                bundle = Bundle.load(bundle_dir)
                prog = load_program(bundle_dir / "cmdq.json")
                _, outs, _ = run_with_data(bundle, prog, topology, feeds, trace=False)
                got = [outs[t] for t in graph.outputs]
                check_outputs(got, list(expected), case.rtol, case.atol)
        return CaseResult(case.op, case.name, True)
    except Exception as e:  # noqa: BLE001 - every failure is recorded with its reason
        return CaseResult(case.op, case.name, False, reason_of(e))


def _import(model: object, inputs: list) -> tuple[object, dict[str, np.ndarray]]:
    """The case's IR in fp32 mode, with index inputs folded as the interpreter path does."""

    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    feeds = {k: np.asarray(v) for k, v in zip(names, inputs, strict=False)}
    try:
        graph = import_model_proto(model, QConfig.fp32())
    except InputError as e:
        if "non-constant" not in e.reason:
            raise
        graph = import_model_proto(bind_index_inputs(model, feeds), QConfig.fp32())
    return graph, {k: v for k, v in feeds.items() if k in graph.inputs}


def run_stack_cases(names: set[str] | None = None, topology: object = None) -> list[CaseResult]:
    """Results for every claimed single-node case (or those named), on `small` by default."""

    topo = topology if topology is not None else load_topology("small", [])
    return [run_case(c, topo) for c in stack_cases() if names is None or c.name in names]
