"""The data pass (ADR-0020): MemoryStore, op log, DataExecutor, verification.

    from kernbench.data import MemoryStore, OpLogger, DataExecutor, compare
    logger = OpLogger(); sim = Simulator(topo, op_logger=logger)
    store = MemoryStore.for_topology(topo)   # fill inputs, snapshot() before pass 1
    ... run pass 1 ...
    DataExecutor(logger, store.snapshot()).run()

See docs/data-pass.md for the "data" dict a stage carries for each op kind.
"""

from kernbench.data.executor import DataError, DataExecutor, gather, op_ranges, scatter
from kernbench.data.math_ops import MATH_OPS, math_op
from kernbench.data.memory_store import MemoryStore
from kernbench.data.op_log import OpLogger, OpRecord
from kernbench.data.verify import compare, tolerance

__all__ = [
    "MATH_OPS", "DataError", "DataExecutor", "MemoryStore", "OpLogger", "OpRecord",
    "compare", "gather", "math_op", "op_ranges", "scatter", "tolerance",
]  # fmt: skip
