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


#: ONNX ops whose single-node cases also run quantized (W8A8): the ops the tensor engine
#: computes, where a quantization mode changes the arithmetic.
QUANTIZED_OPS = ("MatMul", "Gemm", "Conv", "Attention")


def run_case(case: StackCase, topology: object, qconfig: QConfig | None = None) -> CaseResult:
    """Compile, simulate and data-pass one case on `topology`; compare every data set.

    Without `qconfig` (fp32 mode) the outputs are compared with the case's own expected
    outputs at its tolerances. With a quantizing `qconfig` the reference is the IR
    interpreter on the compiled (calibrated) IR, which the data pass must match exactly."""
    from kernbench.ir.interpreter import Interpreter

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"), \
                tempfile.TemporaryDirectory() as tmp:
            warnings.simplefilter("ignore")
            for inputs, expected in case.data_sets:
                graph, feeds = _import(case.model, inputs, qconfig or QConfig.fp32())
                opts = CompileOptions(calib_inputs=feeds)
                state, _ = compile_graph(graph, topology, opts)
                bundle_dir = Path(tmp) / "bundle"
                write_bundle(state, bundle_dir)
                bundle = Bundle.load(bundle_dir)
                prog = load_program(bundle_dir / "cmdq.json")
                _, outs, _ = run_with_data(bundle, prog, topology, feeds, trace=False)
                got = [outs[t] for t in graph.outputs]
                if qconfig is None:
                    check_outputs(got, list(expected), case.rtol, case.atol)
                else:
                    ref = Interpreter(bundle.graph).run(feeds)
                    check_outputs(got, [ref[t] for t in graph.outputs], 0.0, 0.0)
        return CaseResult(case.op, case.name, True)
    except Exception as e:  # noqa: BLE001 - every failure is recorded with its reason
        return CaseResult(case.op, case.name, False, reason_of(e))


def _import(model: object, inputs: list,
            qconfig: QConfig) -> tuple[object, dict[str, np.ndarray]]:
    """The case's IR in `qconfig`'s mode, index inputs folded as the interpreter path does."""

    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    feeds = {k: np.asarray(v) for k, v in zip(names, inputs, strict=False)}
    try:
        graph = import_model_proto(model, qconfig)
    except InputError as e:
        if "non-constant" not in e.reason:
            raise
        graph = import_model_proto(bind_index_inputs(model, feeds), qconfig)
    return graph, {k: v for k, v in feeds.items() if k in graph.inputs}


def run_stack_cases(names: set[str] | None = None, topology: object = None,
                    qconfig: QConfig | None = None) -> list[CaseResult]:
    """Results for every claimed single-node case (or those named), on `small` by default;
    with `qconfig`, only the cases of QUANTIZED_OPS, in that quantization mode."""
    topo = topology if topology is not None else load_topology("small", [])
    return [run_case(c, topo, qconfig) for c in stack_cases()
            if (names is None or c.name in names)
            and (qconfig is None or c.op in QUANTIZED_OPS)]
