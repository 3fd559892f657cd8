"""`onnx.backend.base.Backend` over the importer + reference interpreter, so that onnx's
own node test cases can run against kernbench (scripts/onnx_conformance.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from kernbench.errors import InputError
from kernbench.ir.interpreter import Interpreter
from kernbench.ir.model import Graph
from kernbench.ir.onnx_import import import_model_proto
from kernbench.ir.qconfig import QConfig


def bind_index_inputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` whose small integer index inputs (axes, starts, shapes: int32/int64,
    rank ≤ 1, not the first input of a node) are initializers holding `feeds`' values, the
    way a compiler folds them once they are known."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    data_inputs = {n.input[0] for n in m.graph.node if n.input}
    bound = {k for k, v in feeds.items()
             if v.dtype in (np.int64, np.int32) and v.ndim <= 1 and k not in data_inputs}
    for k in sorted(bound):
        m.graph.initializer.append(onnx.numpy_helper.from_array(feeds[k], k))
    keep = [i for i in m.graph.input if i.name not in bound]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m


class KernbenchRep(BackendRep):
    """Runs one imported model. When the import needs constant index inputs (Slice
    starts, Reduce axes, ... given as graph inputs by the test cases), the import is
    deferred to `run`, which binds those small integer inputs as initializers."""

    def __init__(self, graph: Graph | None, model: onnx.ModelProto) -> None:
        self.model = model
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_names = [o.name for o in model.graph.output]
        self._set(graph)

    def _set(self, graph: Graph | None) -> None:
        self.graph = graph
        self.interp = Interpreter(graph) if graph is not None else None

    def _bind(self, feeds: dict[str, np.ndarray]) -> None:
        self._set(import_model_proto(bind_index_inputs(self.model, feeds), QConfig.fp32()))

    def run(self, inputs: Sequence[np.ndarray] | dict[str, np.ndarray],
            **kwargs: object) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if not isinstance(inputs, list | tuple):
                inputs = [inputs]
            feeds = dict(zip(self.input_names, inputs, strict=False))
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        if self.graph is None:
            self._bind(feeds)
        assert self.graph is not None and self.interp is not None
        feeds = {k: v for k, v in feeds.items() if k in self.graph.inputs}
        out = self.interp.run(feeds)
        return tuple(out[o] for o in self.graph.outputs)


class KernbenchBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: object) -> KernbenchRep:

        try:
            g = import_model_proto(model, QConfig.fp32())
        except InputError as e:
            if "non-constant" not in e.reason:
                raise
            g = None
        return KernbenchRep(g, model)

    @classmethod
    def run_model(cls, model: onnx.ModelProto,
                  inputs: Sequence[np.ndarray] | dict[str, np.ndarray], device: str = "CPU",
                  **kwargs: object) -> tuple[np.ndarray, ...]:  # fmt: skip
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device in ("CPU", "cpu")


prepare = KernbenchBackend.prepare
run_model = KernbenchBackend.run_model
supports_device = KernbenchBackend.supports_device
