"""Run onnx's node test cases (onnx.backend.test.case.node) for the ops the importer
claims, through `KernbenchBackend`. Used by scripts/onnx_conformance.py (which writes
docs/onnx-support.md) and by tests/ir/test_conformance.py."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from kernbench.errors import InputError
from kernbench.ir.backend import KernbenchBackend
from kernbench.ir.onnx_import.handlers import SUPPORTED_OPS


@dataclass
class CaseResult:
    op: str
    name: str
    ok: bool
    reason: str = ""


def claimed_ops() -> list[str]:

    return list(SUPPORTED_OPS)


def collect() -> list:
    """onnx's node test cases; data given as TensorProtos (e.g. Cast's) become arrays."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import onnx.backend.test.case.node as node_cases

        cases = node_cases.collect_testcases()
    for tc in cases:
        if tc.data_sets:
            tc.data_sets = [(_arrays(i), _arrays(e)) for i, e in tc.data_sets]
    return cases


def _arrays(xs: list) -> list:
    from onnx import TensorProto, numpy_helper  # optional heavy module, as above

    return [numpy_helper.to_array(x) if isinstance(x, TensorProto) else x for x in xs]


def run_cases(cases: list | None = None) -> list[CaseResult]:
    """One result per single-node test case of a claimed op (sorted by op, name)."""

    ops = set(claimed_ops())
    cases = collect() if cases is None else cases
    out: list[CaseResult] = []
    for tc in cases:
        nodes = tc.model.graph.node
        if len(nodes) != 1 or nodes[0].op_type not in ops or nodes[0].domain not in ("", "ai.onnx"):
            continue
        op = nodes[0].op_type
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                rep = KernbenchBackend.prepare(tc.model)
                for inputs, expected in tc.data_sets or []:
                    check_outputs(rep.run(list(inputs)), list(expected), tc.rtol, tc.atol)
            out.append(CaseResult(op, tc.name, True))
        except Exception as e:  # noqa: BLE001 - every failure is recorded with its reason
            out.append(CaseResult(op, tc.name, False, reason_of(e)))
    out.sort(key=lambda r: (r.op, r.name))
    return out


def check_outputs(got: list, expected: list, rtol: float, atol: float) -> None:
    """Raise AssertionError unless every output matches the case's expected output."""
    if len(got) != len(expected):
        raise AssertionError(f"{len(got)} outputs, expected {len(expected)}")
    for g, e in zip(got, expected, strict=True):
        _compare(np.asarray(g), np.asarray(e), rtol, atol)


def _compare(got: np.ndarray, exp: np.ndarray, rtol: float, atol: float) -> None:
    if got.shape != exp.shape:
        raise AssertionError(f"shape {list(got.shape)} != expected {list(exp.shape)}")
    if exp.dtype.kind in "fc":
        g64, e64 = got.astype(np.float64), exp.astype(np.float64)
        if not np.allclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True):
            err = np.nanmax(np.abs(g64 - e64))
            raise AssertionError(f"values differ (max abs err {err:.3g}, rtol {rtol}, atol {atol})")
    elif not np.array_equal(got.astype(exp.dtype) if exp.dtype != object else got, exp):
        raise AssertionError("values differ")


def reason_of(e: BaseException) -> str:

    msg = e.reason if isinstance(e, InputError) else str(e)
    msg = " ".join(msg.split()).replace("|", "/")
    if len(msg) > 140:
        msg = msg[:137] + "..."
    return f"{type(e).__name__}: {msg}"
