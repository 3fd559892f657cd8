"""Large initializers read in place (`onnx_import.detached`): the model and the arrays are
what `onnx.load` and `numpy_helper.to_array` give, for every stored model, every element
type and any bytes (mutated files included); the import is the same graph."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from kernbench.errors import InputError
from kernbench.ir.onnx_import import import_onnx, loader
from kernbench.ir.onnx_import.detached import MIN_DETACHED_BYTES, parse_detached
from kernbench.ir.onnx_import.loader import load_model, load_model_keyed, prepare_model
from kernbench.models.builders import build_gpt2

MODELS = Path(__file__).resolve().parents[1] / "models"


def _attached(model: onnx.ModelProto, arrays: dict[str, np.ndarray]) -> bytes:
    """`model` with the arrays' bytes put back, serialized deterministically."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if t.name in arrays:
            assert not t.HasField("raw_data")
            t.raw_data = arrays[t.name].tobytes()
    return m.SerializeToString(deterministic=True)


def _parsed(data: bytes) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.ParseFromString(data)
    return m


def _same_as_protobuf(data: bytes) -> dict[str, np.ndarray]:
    model, arrays = parse_detached(data)
    want = _parsed(data)
    assert _attached(model, arrays) == want.SerializeToString(deterministic=True)
    inits = {t.name: t for t in want.graph.initializer}
    for name, a in arrays.items():
        ref = numpy_helper.to_array(inits[name])
        assert a.dtype == ref.dtype and a.shape == ref.shape and not a.flags.writeable
        assert a.tobytes() == ref.tobytes()
    return arrays


@pytest.mark.parametrize("name", sorted(p.name for p in MODELS.glob("*.onnx")))
def test_every_stored_model_parses_as_protobuf_parses_it(name):
    _same_as_protobuf((MODELS / name).read_bytes())


def test_a_models_large_weights_are_read_in_place():
    data = build_gpt2(n_layer=1, d=128, heads=4, seq=8).SerializeToString()
    arrays = _same_as_protobuf(data)
    big = [t.name for t in _parsed(data).graph.initializer
           if len(t.raw_data) >= MIN_DETACHED_BYTES]
    assert big and sorted(arrays) == sorted(big)
    for a in arrays.values():  # views of the bytes read, not copies
        assert np.shares_memory(a, np.frombuffer(data, np.uint8))


#: every element type: (ONNX type, numpy type of its values)
TYPES = [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64),
         (TensorProto.FLOAT16, np.float16), (TensorProto.BFLOAT16, ml_dtypes.bfloat16),
         (TensorProto.INT8, np.int8), (TensorProto.UINT8, np.uint8),
         (TensorProto.INT16, np.int16), (TensorProto.UINT16, np.uint16),
         (TensorProto.INT32, np.int32), (TensorProto.UINT32, np.uint32),
         (TensorProto.INT64, np.int64), (TensorProto.UINT64, np.uint64),
         (TensorProto.BOOL, np.bool_), (TensorProto.INT4, np.int8),
         (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn)]


def _model(inits: list[TensorProto]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def test_every_element_type_gives_to_arrays_array():
    rng = np.random.default_rng(0)
    inits = []
    for i, (code, np_type) in enumerate(TYPES):
        n = 3 * MIN_DETACHED_BYTES // np.dtype(np_type).itemsize + i  # not a round size
        values = rng.integers(-8, 8, size=n).astype(np_type)
        inits.append(helper.make_tensor(f"w{i}", code, [n], values.tobytes(), raw=True)
                     if code != TensorProto.INT4 else
                     helper.make_tensor(f"w{i}", code, [2 * n], values.tobytes(), raw=True))
    arrays = _same_as_protobuf(_model(inits).SerializeToString())
    # int4 is unpacked by to_array and float8 refused by the import: they keep raw_data
    kept = (TensorProto.INT4, TensorProto.FLOAT8E4M3FN)
    assert sorted(arrays) == sorted(f"w{i}" for i, (c, _) in enumerate(TYPES) if c not in kept)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field `number` holding `payload`."""
    n, out = len(payload), bytearray([number << 3 | 2])
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + payload


def _tensor(name: str, dims: list[int], raw: bytes) -> TensorProto:
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
    t.raw_data = raw
    return t


def test_tensors_not_plainly_stored_keep_their_raw_data():
    k = MIN_DETACHED_BYTES // 4  # float32 elements of the smallest raw_data read in place
    both = _tensor("both", [k], np.zeros(k, np.float32).tobytes())
    both.float_data.extend([1.0] * k)  # a typed field as well as raw_data
    short = _tensor("short", [4 * k], np.ones(k, np.float32).tobytes())  # dims say 4 × more
    plain = _tensor("plain", [k], np.full(k, 2, np.float32).tobytes())
    data = _model([both, short, plain]).SerializeToString()
    # a tensor with raw_data twice (protobuf keeps the last one), in a second graph field
    # (protobuf merges it into the first: one more initializer)
    twice = TensorProto(name="twice", data_type=TensorProto.FLOAT, dims=[k]).SerializeToString()
    twice += _field(9, np.ones(k, np.float32).tobytes()) + _field(9, np.full(k, 3, np.float32)
                                                                   .tobytes())
    data += _field(7, _field(5, twice))
    assert [t.name for t in _parsed(data).graph.initializer] == ["both", "short", "plain",
                                                                 "twice"]
    arrays = _same_as_protobuf(data)
    assert sorted(arrays) == ["plain"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_files_parse_or_fail_as_protobuf_does(data):
    base = _model([helper.make_tensor(
        f"w{i}", TensorProto.FLOAT, [MIN_DETACHED_BYTES // 4],
        np.arange(MIN_DETACHED_BYTES // 4, dtype=np.float32).tobytes(), raw=True)
        for i in range(2)]).SerializeToString()
    b = bytearray(base)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(b) - 1))
        b[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(len(b) // 2, len(b)))
    b = bytes(b[:cut])
    try:
        want = _parsed(b).SerializeToString(deterministic=True)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            parse_detached(b)
        return
    model, arrays = parse_detached(b)
    assert _attached(model, arrays) == want


def test_the_import_is_the_graph_of_the_whole_model(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(build_gpt2(n_layer=2, d=128, heads=4, seq=8), str(path))
    _, _, arrays = load_model_keyed(path)
    assert arrays, "the case must have initializers read in place"
    got = import_onnx(path)
    # the reference: the same import with the file parsed whole by protobuf
    monkeypatch.setattr(loader, "parse_detached", lambda data: (_parsed(data), {}))
    assert not load_model_keyed(path)[2]
    want = import_onnx(path)
    assert got.to_json() == want.to_json()
    assert sorted(got.weights) == sorted(want.weights)
    for k, a in want.weights.items():
        assert got.weights[k].dtype == a.dtype and np.array_equal(got.weights[k], a)
    # load_model gives the prepared whole model, raw_data and all
    assert load_model(path).SerializeToString(deterministic=True) == \
        prepare_model(onnx.load(str(path))).SerializeToString(deterministic=True)


def test_a_truncated_file_is_one_input_error(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(build_gpt2(n_layer=1, d=128, heads=4, seq=8).SerializeToString()[:-1000])
    with pytest.raises(InputError, match="not a valid ONNX protobuf"):
        import_onnx(path)
