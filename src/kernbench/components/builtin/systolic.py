"""Closed-form systolic-array GEMM timing that matches SCALE-Sim 3.0.0 exactly.

Pure and dependency-free (no simpy, no numpy): every function maps integers to a number.

The GEMM is ``C[m, n] = A[m, k] @ B[k, n]`` on a ``rows x cols`` array of MACs (``rows`` is
SCALE-Sim's ``ArrayHeight``, ``cols`` its ``ArrayWidth``). SCALE-Sim, given the topology row
``Layer, M, N, K,`` = ``G, m, n, k,``, treats A (m x k) as its IFMAP operand matrix, B (k x n) as
its filter operand matrix and C (m x n) as its OFMAP, and names three extents per dataflow:
``Sr`` (spread over array rows), ``Sc`` (spread over array columns) and ``T`` (streamed in time):

======== ===== ===== ===== ===========================================
dataflow  Sr    Sc    T     what stays in the PEs
======== ===== ===== ===== ===========================================
``ws``    k     n     m     weights: B tile (k x n) loaded, A streamed
``os``    m     n     k     outputs: C tile (m x n) accumulated in place
``is``    k     m     n     inputs: A^T tile (k x m) loaded, B streamed
======== ===== ===== ===== ===========================================

The work is cut into ``folds = ceil(Sr / rows) * ceil(Sc / cols)`` array-sized tiles that run one
after another with no overlap; every fold costs the same number of cycles, padding included:

* ``ws``: each fold takes ``2*rows + cols + m - 2`` cycles: ``rows`` cycles to load the weight
  tile, then ``m`` input rows are streamed through with a ``rows - 1`` skew (fill) and a
  ``cols - 1`` drain.
* ``os``: each fold takes ``rows + cols + k - 2`` cycles: ``k`` reduction steps with a
  ``rows - 1`` plus ``cols - 1`` skew (fill and drain); there is no separate load phase.
* ``is``: each fold takes ``2*rows + cols + n - 2`` cycles: the same shape as ``ws`` with the
  input tile preloaded and ``n`` filter columns streamed.

SCALE-Sim's "compute cycles" (the 2nd item of
``single_layer_sim.get_compute_report_items()``) is the cycle at which the last OFMAP demand line
is serviced, counted from 0, so it is ``folds * cycles_per_fold - 1``. This holds when the memory
system never stalls (``stall_cycles == 0``), which is the case in SCALE-Sim's ``CALC`` interface
bandwidth mode that ``scripts/scalesim_reference.py`` uses; stalls would add to it.

Reference numbers live in ``tests/data/scalesim_gemm.json`` (regenerate with
``scripts/scalesim_reference.py``); ``tests/test_systolic_scalesim.py`` checks every case.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "DATAFLOWS",
    "SystolicMapping",
    "compute_utilization",
    "cycles_per_fold",
    "mapping_efficiency",
    "systolic_compute_cycles",
    "systolic_folds",
    "systolic_mapping",
]

DATAFLOWS: tuple[str, ...] = ("ws", "os", "is")


class SystolicMapping(NamedTuple):
    """SCALE-Sim's spatio-temporal extents of a GEMM for one dataflow.

    ``sr`` is spread over the array rows, ``sc`` over the array columns and ``t`` is the number of
    time steps streamed through each fold.
    """

    sr: int
    sc: int
    t: int


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _check(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> None:
    for name, value in (("m", m), ("n", n), ("k", k), ("rows", rows), ("cols", cols)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if dataflow not in DATAFLOWS:
        raise ValueError(f"dataflow must be one of {DATAFLOWS}, got {dataflow!r}")


def systolic_mapping(m: int, n: int, k: int, dataflow: str) -> SystolicMapping:
    """Return SCALE-Sim's ``(Sr, Sc, T)`` for ``C[m,n] = A[m,k] @ B[k,n]`` under ``dataflow``.

    ``ws`` -> ``(k, n, m)``, ``os`` -> ``(m, n, k)``, ``is`` -> ``(k, m, n)``.
    """
    _check(m, n, k, 1, 1, dataflow)
    if dataflow == "ws":
        return SystolicMapping(sr=k, sc=n, t=m)
    if dataflow == "os":
        return SystolicMapping(sr=m, sc=n, t=k)
    return SystolicMapping(sr=k, sc=m, t=n)


def systolic_folds(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> tuple[int, int]:
    """Return ``(row_folds, col_folds)`` = ``(ceil(Sr / rows), ceil(Sc / cols))``.

    The array runs ``row_folds * col_folds`` tiles one after another.
    """
    _check(m, n, k, rows, cols, dataflow)
    sr, sc, _ = systolic_mapping(m, n, k, dataflow)
    return _ceil_div(sr, rows), _ceil_div(sc, cols)


def cycles_per_fold(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> int:
    """Return the cycles one fold occupies the array (SCALE-Sim's OFMAP demand lines per fold).

    ``ws`` and ``is``: ``2*rows + cols + T - 2`` (a ``rows``-cycle preload of the stationary tile,
    then ``T`` streamed steps with ``rows - 1`` fill and ``cols - 1`` drain).
    ``os``: ``rows + cols + T - 2`` (``T = k`` steps with fill and drain, no preload).
    """
    _check(m, n, k, rows, cols, dataflow)
    t = systolic_mapping(m, n, k, dataflow).t
    preload = 0 if dataflow == "os" else rows
    return preload + rows + cols + t - 2


def systolic_compute_cycles(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> int:
    """Return SCALE-Sim 3.0.0's stall-free "compute cycles" for the GEMM on the array.

    ``C[m, n] = A[m, k] @ B[k, n]`` on ``rows x cols`` PEs with ``dataflow`` in
    ``{"ws", "os", "is"}``; the value equals the 2nd item of SCALE-Sim's
    ``get_compute_report_items()`` for the topology row ``G, m, n, k,`` when no memory stall
    occurs. It is ``row_folds * col_folds * cycles_per_fold - 1`` (see the module docstring).

    Raises:
        ValueError: if a dimension is not a positive int or the dataflow is unknown.
    """
    row_folds, col_folds = systolic_folds(m, n, k, rows, cols, dataflow)
    return row_folds * col_folds * cycles_per_fold(m, n, k, rows, cols, dataflow) - 1


def mapping_efficiency(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> float:
    """Return the fraction of PEs holding useful work, averaged over folds (0 < value <= 1).

    Equals ``Sr * Sc / (row_folds * rows * col_folds * cols)``, i.e. SCALE-Sim's "mapping
    efficiency" divided by 100 (SCALE-Sim reports a percentage averaged over folds, and the
    average of per-fold ``used_rows * used_cols`` factorises into this product).
    """
    sr, sc, _ = systolic_mapping(m, n, k, dataflow)
    row_folds, col_folds = systolic_folds(m, n, k, rows, cols, dataflow)
    return (sr * sc) / (row_folds * rows * col_folds * cols)


def compute_utilization(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> float:
    """Return SCALE-Sim's "compute util" as a fraction (its report gives a percentage).

    Per fold SCALE-Sim divides the MACs done, ``used_PEs * T``, by ``rows * cols`` times the
    fold's length as it counts it: ``2*rows + 2*cols + T - 3`` for ``ws``/``is`` and
    ``rows + cols + T - 2`` for ``os``, then averages over folds. The fold length here is
    SCALE-Sim's own bookkeeping (its demand-matrix height plus width minus one) and is not
    the same as :func:`cycles_per_fold`; it is reproduced only to match the reference.
    """
    t = systolic_mapping(m, n, k, dataflow).t
    fold_len = rows + cols + t - 2 if dataflow == "os" else 2 * rows + 2 * cols + t - 3
    return mapping_efficiency(m, n, k, rows, cols, dataflow) * t / fold_len
