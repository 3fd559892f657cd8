"""An ONNX file's large weights read in place: one copy of the file, not three.

`onnx.load` reads the file into bytes and parses them; protobuf copies every
initializer's `raw_data` into the message, and `numpy_helper.to_array` copies it out
again (its `raw_data` is a new bytes object on each read). A model of hundreds of MB is
thus written to fresh memory three times, and the kernel faults in (and zeroes) every page
of it: most of an import's time where page faults are dear.

`parse_detached(data)` parses the same bytes without those copies: a scan of the protobuf
wire format finds the `raw_data` of the top graph's initializers of at least
`MIN_DETACHED_BYTES` (and more than `light.LIGHT_ELEMENTS` elements: the initializers
the checker and shape inference take as typed inputs anyway, `light.movable`), the
message is parsed without them, and each becomes an array
viewing `data`: what `to_array` returns for them (`np.frombuffer(raw_data,
dtype).reshape(dims)`, read-only), on little-endian hosts, for the plain numeric types
below. A tensor whose other fields make it anything but plainly stored (typed data fields
as well, external data, a segment, a byte count that does not match its dims) gets its `raw_data` back instead, so it parses, checks and converts exactly as
before. Bytes the scan cannot read, a tag or length protobuf may refuse (more than 5
bytes) and initializer names that repeat are parsed whole (protobuf then says what is
wrong, or gives what it always gave).

The arrays keep `data` alive: while any of them lives, so does the whole file's copy.
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from kernbench.ir.onnx_import.light import LIGHT_ELEMENTS, TYPED_FIELDS

#: raw_data fields of at least this many bytes are read in place
MIN_DETACHED_BYTES = 1 << 14

#: element types whose raw_data `to_array` views as it is (no unpacking, no check)
_PLAIN = frozenset((TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                    TensorProto.BFLOAT16, TensorProto.INT8, TensorProto.UINT8,
                    TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32,
                    TensorProto.UINT32, TensorProto.INT64, TensorProto.UINT64,
                    TensorProto.BOOL))
# field numbers: ModelProto.graph, GraphProto.initializer, TensorProto.raw_data
_GRAPH, _INITIALIZER, _RAW_DATA = 7, 5, 9
_LEN = 2  # the length-delimited wire type

Span = tuple[int, int]  # (offset of the bytes in the file, their length)


class _Malformed(ValueError):
    """The scan met bytes it does not read (protobuf's parse will say what is wrong)."""


def parse_detached(data: bytes) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The ModelProto of `data` (the bytes of an ONNX file) with its large plain
    initializers' raw_data left out, and {initializer name: its array viewing `data`}.
    The same message `ParseFromString(data)` gives, but for those fields. Raises what
    `ParseFromString` raises on bytes it cannot parse."""
    if sys.byteorder != "little":
        return _whole(data), {}
    model = onnx.ModelProto()
    try:
        light, spans = _strip_model(memoryview(data))
        model.ParseFromString(light)
    except Exception:  # noqa: BLE001 - bytes the scan or protobuf refuse: parse them whole
        return _whole(data), {}
    inits = model.graph.initializer
    # the scan and protobuf disagree, or names repeat (arrays are found by name): whole
    if len(inits) != len(spans) or len({t.name for t in inits}) != len(inits):
        return _whole(data), {}
    arrays: dict[str, np.ndarray] = {}
    for t, span in zip(inits, spans, strict=True):
        if span is None:
            continue
        a = _viewed(t, data, span)
        if a is None:  # not plainly stored: as protobuf would have parsed it
            t.raw_data = data[span[0]:span[0] + span[1]]
        else:
            arrays[t.name] = a
    return model, arrays


def _whole(data: bytes) -> onnx.ModelProto:
    """`data` parsed by protobuf alone (what it refuses, it raises)."""
    model = onnx.ModelProto()
    model.ParseFromString(data)
    return model


def _viewed(t: TensorProto, data: bytes, span: Span) -> np.ndarray | None:
    """`to_array(t)` had `t` kept its raw_data `span`, viewing `data`; None when `t` is not
    plainly stored (module docstring)."""
    if (t.data_type not in _PLAIN or t.HasField("segment")
            or t.data_location != TensorProto.DEFAULT or len(t.external_data)
            or any(len(getattr(t, f)) for f in TYPED_FIELDS)):
        return None
    dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
    n = 1
    for d in t.dims:
        n *= d
    if any(d < 0 for d in t.dims) or n * dtype.itemsize != span[1] or n <= LIGHT_ELEMENTS:
        return None  # (at most LIGHT_ELEMENTS: the checker reads its values, light.movable)
    return np.frombuffer(data, dtype=dtype, count=n, offset=span[0]).reshape(tuple(t.dims))


def _varint(buf: memoryview, i: int) -> tuple[int, int]:
    """A tag or a length at buf[i]: (its value, the offset after it). protobuf refuses one
    of more than 5 bytes; anything above 2**31 is left to it too (`_Malformed`)."""
    value = shift = 0
    while shift < 35:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value >= 1 << 31:
                break
            return value, i
        shift += 7
    raise _Malformed("a tag or length protobuf may refuse")


def _skip_varint(buf: memoryview, i: int) -> int:
    """The offset after a varint value (copied as it is: protobuf checks it)."""
    for j in range(i, min(i + 10, len(buf))):
        if buf[j] < 0x80:
            return j + 1
    raise _Malformed("varint too long")


def _encoded(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _fields(buf: memoryview, start: int, end: int):  # noqa: ANN202 - a generator of tuples
    """(field number, wire type, tag offset, payload offset or -1, end offset) of each field
    of the message in buf[start:end]."""
    i = start
    while i < end:
        at = i
        tag, i = _varint(buf, i)
        wire = tag & 7
        if wire == 0:
            i, body = _skip_varint(buf, i), -1
        elif wire == 1:
            i, body = i + 8, -1
        elif wire == 5:
            i, body = i + 4, -1
        elif wire == _LEN:
            n, body = _varint(buf, i)
            i = body + n
        else:
            raise _Malformed(f"wire type {wire}")
        if i > end or tag >> 3 == 0:
            raise _Malformed("truncated field")
        yield tag >> 3, wire, at, body, i


def _strip_model(buf: memoryview) -> tuple[bytes, list[Span | None]]:
    """The model's bytes without the large raw_data of its top graph's initializers, and
    each initializer's left-out span (None: kept), in order."""
    out = bytearray()
    spans: list[Span | None] = []
    for field, wire, at, body, end in _fields(buf, 0, len(buf)):
        if field == _GRAPH and wire == _LEN:
            _embed(out, _GRAPH, _strip_graph(buf, body, end, spans))
        else:
            out += buf[at:end]
    return bytes(out), spans


def _strip_graph(buf: memoryview, start: int, end: int, spans: list[Span | None]) -> bytearray:
    out = bytearray()
    for field, wire, at, body, stop in _fields(buf, start, end):
        if field == _INITIALIZER and wire == _LEN:
            _embed(out, _INITIALIZER, _strip_tensor(buf, body, stop, spans))
        else:
            out += buf[at:stop]
    return out


def _strip_tensor(buf: memoryview, start: int, end: int, spans: list[Span | None]) -> bytearray:
    """The tensor's bytes without its raw_data when it has one raw_data field, of at least
    `MIN_DETACHED_BYTES` (given twice, protobuf keeps the last: left as it is)."""
    fields = list(_fields(buf, start, end))
    raw = [f for f in fields if f[0] == _RAW_DATA and f[1] == _LEN]
    span = None
    if len(raw) == 1 and raw[0][4] - raw[0][3] >= MIN_DETACHED_BYTES:
        span = (raw[0][3], raw[0][4] - raw[0][3])
    out = bytearray()
    for _field, _wire, at, body, stop in fields:
        if span is None or body != span[0]:  # every field but the raw_data left out
            out += buf[at:stop]
    spans.append(span)
    return out


def _embed(out: bytearray, field: int, payload: bytes | bytearray) -> None:
    out += _encoded(field << 3 | _LEN)
    out += _encoded(len(payload))
    out += payload


__all__ = ["MIN_DETACHED_BYTES", "parse_detached"]
