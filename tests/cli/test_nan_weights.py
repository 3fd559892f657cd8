"""NaN weights: one `warning:` line naming the tensor, and no raw numpy RuntimeWarning
(quantizing NaN is defined: the zero point; ±Inf saturates; the same on every CPU)."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from kernbench.cli import main
from kernbench.numerics import quant as qmath

MODELS = __import__("pathlib").Path(__file__).resolve().parents[1] / "models"


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_nan_weight_warns_once_and_numpy_stays_quiet(tmp_path, capsys, bad):
    m = onnx.load(str(MODELS / "gpt2.onnx"))
    init = next(i for i in m.graph.initializer
                if numpy_helper.to_array(i).dtype == np.float32
                and numpy_helper.to_array(i).ndim == 2 and numpy_helper.to_array(i).size > 1000)
    a = numpy_helper.to_array(init).copy()
    a.flat[3] = bad
    init.CopyFrom(numpy_helper.from_array(a, init.name))
    onnx.save(m, str(tmp_path / "nan.onnx"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["run", str(tmp_path / "nan.onnx"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 0
    assert [w for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert f"weight '{init.name}" in err and "1 NaN/Inf value(s)" in err
    assert "RuntimeWarning" not in err
    assert np.geterr()["invalid"] == "warn"  # switched off for that command only


def test_quantize_defines_nan_and_inf():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning either
        q = qmath.quantize(np.array([np.nan, np.inf, -np.inf, 1.0, 0.0], np.float32),
                           np.float32(0.5), 3, 8)
    assert q.tolist() == [3, 127, -128, 5, 3]
    z = qmath.quantize(np.array([1.0, -1.0, 0.0], np.float32), np.float32(0.0), 0, 8)
    assert z.tolist() == [127, -128, 0]  # a zero scale saturates, 0/0 is the zero point


@pytest.mark.parametrize(("shape", "value", "warned"), [
    ((), -np.inf, False),    # masked_fill's -inf, as PyTorch and Optimum export it
    ((1,), np.inf, False),
    ((), np.nan, True),      # NaN is never a fill value
    ((2,), -np.inf, True),   # a tensor of them is a weight that went wrong
])
def test_a_one_element_infinite_constant_is_a_fill_value_not_a_broken_weight(
        capsys, shape, value, warned):
    from types import SimpleNamespace

    from kernbench.errors import InputError
    from kernbench.host.flow import check_graph_inputs

    graph = SimpleNamespace(qconfig=None, weights={
        "fill": np.full(shape, value, np.float32), "w": np.ones((4, 4), np.float32)})
    with np.errstate():  # a warning switches numpy's float warnings off: restored here
        check_graph_inputs(graph, None, "m.onnx", strict=False)
        assert ("weight 'fill'" in capsys.readouterr().err) == warned
        if warned:
            with pytest.raises(InputError, match="refused with --strict"):
                check_graph_inputs(graph, None, "m.onnx", strict=True)
        else:
            check_graph_inputs(graph, None, "m.onnx", strict=True)
