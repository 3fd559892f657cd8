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
from kernbench.ir.onnx_import.light import LIGHT_ELEMENTS
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


def _parses_or_fails_as_protobuf(data: bytes) -> None:
    """`parse_detached(data)` gives protobuf's message (the arrays put back), or raises
    what protobuf raises."""
    try:
        want = _parsed(data).SerializeToString(deterministic=True)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            parse_detached(data)
        return
    model, arrays = parse_detached(data)
    assert _attached(model, arrays) == want


@pytest.mark.parametrize("name", sorted(p.name for p in MODELS.glob("*.onnx")))
def test_every_stored_model_parses_as_protobuf_parses_it(name):
    _same_as_protobuf((MODELS / name).read_bytes())


def test_a_models_large_weights_are_read_in_place():
    data = build_gpt2(n_layer=1, d=128, heads=4, seq=8).SerializeToString()
    arrays = _same_as_protobuf(data)
    big = [t.name for t in _parsed(data).graph.initializer
           if len(t.raw_data) >= MIN_DETACHED_BYTES and np.prod(t.dims) > LIGHT_ELEMENTS]
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
    k = 2 * MIN_DETACHED_BYTES // 4  # float32 elements: above both thresholds
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
        f"w{i}", TensorProto.FLOAT, [2 * LIGHT_ELEMENTS],
        np.arange(2 * LIGHT_ELEMENTS, dtype=np.float32).tobytes(), raw=True)
        for i in range(2)]).SerializeToString()
    assert len(parse_detached(base)[1]) == 2  # the case reads both in place
    b = bytearray(base)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(b) - 1))
        if data.draw(st.booleans()):
            b[i] = data.draw(st.integers(0, 255))
        else:  # bytes inserted: a varint made longer, a field that was not there
            b[i:i] = data.draw(st.binary(min_size=1, max_size=3))
    cut = data.draw(st.integers(len(b) // 2, len(b)))
    _parses_or_fails_as_protobuf(bytes(b[:cut]))


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


def _varint(n: int, width: int | None = None) -> bytes:
    """`n` as a protobuf varint, padded to `width` bytes (a valid but overlong encoding)."""
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        more = n or (width is not None and len(out) + 1 < width)
        out.append(b | (0x80 if more else 0))
        if not more:
            return bytes(out)


def _ld(tag: int, payload: bytes, tag_w: int | None = None, len_w: int | None = None) -> bytes:
    return _varint(tag, tag_w) + _varint(len(payload), len_w) + payload


_RAW = np.arange(8192, dtype=np.float32).tobytes()
_HEAD = _varint(0x08) + _varint(8) + _ld(0x42, _ld(0x12, b"") + _varint(0x10) + _varint(18))
_TENSOR = _varint(0x08) + _varint(8192) + _varint(0x10) + _varint(1) + _ld(0x42, b"w")


@pytest.mark.parametrize("data", [
    _HEAD + _ld(0x3A, _ld(0x2A, _TENSOR + _ld(0x4A, _RAW, tag_w=6))),   # raw_data's tag
    _HEAD + _ld(0x3A, _ld(0x2A, _TENSOR + _ld(0x4A, _RAW, len_w=6))),   # its length
    _HEAD + _ld(0x3A, _ld(0x2A, _TENSOR + _ld(0x4A, _RAW), tag_w=6)),   # the initializer's
    _HEAD + _ld(0x3A, _ld(0x2A, _TENSOR + _ld(0x4A, _RAW)), len_w=6),   # the graph's length
    _HEAD + _ld(0x3A, _ld(0x2A, _TENSOR + _ld(0x4A, _RAW, len_w=5))),   # 5 bytes: accepted
    _HEAD + _ld(0x3A, _ld(0x2A, _TENSOR + _ld(0x4A, _RAW) + _varint(0x48) + _varint(7))),
], ids=["tag-6", "length-6", "init-tag-6", "graph-length-6", "length-5", "field-9-varint"])
def test_tags_and_lengths_protobuf_refuses_are_refused(data):
    """protobuf refuses a tag or length of more than 5 bytes; the scan must not read past
    it into a message protobuf would accept. A field 9 of another wire type (unknown to
    protobuf) stays."""
    _parses_or_fails_as_protobuf(data)


def test_an_initializer_the_checker_reads_is_not_read_in_place(tmp_path, monkeypatch):
    """An int64 table of 2048 elements (16 KiB) is not a large weight to the checker:
    shape inference with data propagation reads its values, so it must stay in the
    message, and the import refuses the model exactly as it did."""
    table = np.ones(2048, np.int64)
    table[0], table[1] = 4, 6
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [7, 7])
    g = helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["shape"], axis=0),
         helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Relu", ["r"], ["y"])], "g", [x], [y],
        initializer=[numpy_helper.from_array(table, "table"),
                     numpy_helper.from_array(np.array([1, 0], np.int64), "idx")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    assert not parse_detached(path.read_bytes())[1]
    with pytest.raises(InputError, match="shape inference failed"):
        import_onnx(path)
    float_4096 = helper.make_tensor("b", TensorProto.FLOAT, [4096],
                                    np.zeros(4096, np.float32).tobytes(), raw=True)
    assert not parse_detached(_model([float_4096]).SerializeToString())[1]


def test_repeated_initializer_names_are_parsed_whole():
    a = helper.make_tensor("w", TensorProto.FLOAT, [8192], np.zeros(8192, np.float32)
                           .tobytes(), raw=True)
    b = helper.make_tensor("w", TensorProto.FLOAT, [8192], np.ones(8192, np.float32)
                           .tobytes(), raw=True)
    data = _model([a, b]).SerializeToString()
    model, arrays = parse_detached(data)
    assert arrays == {}
    assert model.SerializeToString(deterministic=True) == \
        _parsed(data).SerializeToString(deterministic=True)
