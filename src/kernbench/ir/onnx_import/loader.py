"""Load an ONNX model safely: size cap, external data confined to the model's folder,
onnx.checker (full) and strict shape inference. Every failure is an InputError."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import external_data_helper, serialization

from kernbench.errors import MAX_MODEL_BYTES, InputError, check_input_file
from kernbench.ir.onnx_import.detached import parse_detached
from kernbench.ir.onnx_import.initializers import Source, file_key, sliced
from kernbench.ir.onnx_import.light import inferred_shapes, light_model
from kernbench.ir.onnx_import.onnx_util import to_array
from kernbench.ir.onnx_import.opset import (
    MAX_OPSET,
    MIN_OPSET,
    default_opset,
    normalize_opset,
    target_opset,
)


def load_model(path: str | Path) -> onnx.ModelProto:
    """Read, check and shape-infer `path`; returns the inferred ModelProto (every
    initializer with its data)."""
    model, _, arrays = load_model_keyed(path)
    _attach(model, arrays)
    return model


def load_model_keyed(path: str | Path
                     ) -> tuple[onnx.ModelProto, tuple, dict[str, np.ndarray]]:
    """`load_model`, the key (`initializers.file_key`) of the file as it was read, and the
    large initializers read in place (`detached`): {name: array}, their raw_data left out
    of the model (it checks and infers them as typed inputs)."""
    path = Path(path)
    f = str(path)
    check_input_file(path, MAX_MODEL_BYTES)  # a regular file (never a FIFO), bounded
    key = file_key(path)  # before the read: a file changed while read gets another key
    model, arrays = _read(path)
    _remember_external(key, _check_external_data(model, path))
    _load_external(model, path)
    if target_opset(model) != default_opset(model):  # the version converter reads the
        # whole model (or its opset is relabelled): give it the weights back
        _attach(model, arrays)
        arrays = {}
    return prepare_model(model, file=f, detached=frozenset(arrays)), key, arrays


def read_initializers(path: Path, sources: dict[str, Source], *,
                      listing: str) -> dict[str, np.ndarray]:
    """{IR tensor id: the array `sources[id]` names (`initializers.Source`)} of the model
    file `path`, as the import makes it (`to_array`, then the fusion's slice), with
    `load_model`'s checks but no checker or shape inference. `listing`: the file that
    asked (diagnostics). A missing model or initializer, or a slice outside it, is an
    InputError."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"lists weights of {path.name}, which is missing", file=listing)
    check_input_file(path, MAX_MODEL_BYTES)
    model, arrays = _read(path)
    _check_external_data(model, path)
    _load_external(model, path)
    inits = {t.name: t for t in model.graph.initializer}
    out = {}
    for tid, src in sorted(sources.items()):
        name = src if isinstance(src, str) else src["initializer"]
        if name not in arrays:
            t = inits.get(name)
            if t is None:
                raise InputError(f"initializer {name!r} is not in {path.name}", file=listing,
                                 where=f"tensor {tid}")
            try:
                arrays[name] = to_array(t)
            except ValueError as e:
                raise InputError(str(e), file=str(path), where=f"initializer {name}") from None
        try:
            out[tid] = sliced(arrays[name], src)
        except ValueError as e:
            raise InputError(f"initializer {name!r}: {e}", file=listing,
                             where=f"tensor {tid}") from None
    return out


def _read(path: Path) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The ModelProto of `path` without its external data, and its large initializers
    read in place (`detached.parse_detached`; none for a text-format file)."""
    fmt = serialization.registry.get_format_from_file_extension(path.suffix)
    try:
        if fmt not in (None, "protobuf"):
            return onnx.load(str(path), load_external_data=False), {}
        return parse_detached(path.read_bytes())
    except Exception as e:  # DecodeError, truncated protobuf, ...
        raise InputError(f"not a valid ONNX protobuf ({_one_line(e)})", file=str(path)) from None


def _attach(model: onnx.ModelProto, arrays: dict[str, np.ndarray]) -> None:
    """Give the initializers read in place their raw_data back."""
    for t in model.graph.initializer:
        a = arrays.get(t.name)
        if a is not None:
            t.raw_data = a.tobytes()


def _load_external(model: onnx.ModelProto, path: Path) -> None:
    try:
        external_data_helper.load_external_data_for_model(model, str(path.parent.resolve()))
    except Exception as e:
        raise InputError(f"cannot load external data ({_one_line(e)})", file=str(path)) from None


def copy_with_external_data(src: str | Path, dst: str | Path) -> None:
    """Copy an ONNX model file and the external data files it references (paths kept
    relative to the model, so onnxruntime finds them beside the copy). The references
    were confined to the model's folder when the model was loaded; a file `load_model`
    read, unchanged since (`file_key`), is not parsed again to find them."""

    src, dst = Path(src), Path(dst)
    shutil.copyfile(src, dst)
    locations = _LOADED.get(file_key(src))
    if locations is None:
        model = onnx.load(str(src), load_external_data=False)
        locations = _external_locations(model)
    base, out = src.parent.resolve(), dst.parent.resolve()
    for loc in locations:
        target = (base / loc).resolve()
        if Path(loc).is_absolute() or not target.is_relative_to(base):
            continue
        (out / loc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, out / loc)


#: file key (`file_key`) → the external data locations of the model file loaded from it,
#: the latest `_LOADED_KEPT` files: `copy_with_external_data` of a model just loaded (a
#: compile writing its bundle) does not parse hundreds of MB again
_LOADED: dict[tuple, tuple[str, ...]] = {}
_LOADED_KEPT = 8


def _remember_external(key: tuple, locations: tuple[str, ...]) -> None:
    _LOADED.pop(key, None)
    _LOADED[key] = locations
    while len(_LOADED) > _LOADED_KEPT:
        del _LOADED[next(iter(_LOADED))]


def _external_locations(model: onnx.ModelProto) -> tuple[str, ...]:
    """The distinct external data locations of `model`'s tensors, in tensor order."""
    seen: dict[str, None] = {}
    for t in external_data_helper._get_all_tensors(model):
        if external_data_helper.uses_external_data(t):
            seen.setdefault(external_data_helper.ExternalDataInfo(t).location or "", None)
    return tuple(seen)


def _check_external_data(model: onnx.ModelProto, path: Path) -> tuple[str, ...]:
    """Refuse external data outside the model's folder or missing; the locations."""
    base = path.parent.resolve()
    for t in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(t):
            continue
        info = external_data_helper.ExternalDataInfo(t)
        loc = info.location or ""
        target = (base / loc).resolve()
        if Path(loc).is_absolute() or not target.is_relative_to(base):
            raise InputError(
                f"external data path {loc!r} leaves the model's folder; refused",
                file=str(path),
                where=f"initializer {t.name}",
            )
        if not target.is_file():
            raise InputError(
                f"external data file {loc!r} not found", file=str(path), where=f"initializer {t.name}"
            )
        check_input_file(target, MAX_MODEL_BYTES, label=f"{path}: initializer {t.name}: "
                                                        f"external data {loc!r}")
    return _external_locations(model)


def prepare_model(model: onnx.ModelProto, *, file: str | None = None,
                  detached: frozenset[str] = frozenset()) -> onnx.ModelProto:
    """Opset normalisation (opset.py), onnx.checker, strict shape inference with data
    propagation. The returned model carries `source_opset` in its metadata_props.
    `detached`: initializers whose raw_data was read in place (`load_model_keyed`), checked
    as the large weights they are."""
    source = default_opset(model)
    model = normalize_opset(model, file=file)
    _set_source_opset(model, source)
    light = light_model(model, detached)  # the weights left out: they decide no check, no shape
    try:
        onnx.checker.check_model(light, full_check=False)
    except Exception as e:
        raise InputError(f"onnx.checker failed: {_one_line(e)}", file=file) from None
    try:
        return inferred_shapes(model, light, check_type=True, strict_mode=True, data_prop=True)
    except Exception as e:
        raise InputError(f"shape inference failed: {_one_line(e)}", file=file) from None


def _set_source_opset(model: onnx.ModelProto, opset: int | None) -> None:
    for p in model.metadata_props:
        if p.key == SOURCE_OPSET_KEY:
            return  # already normalised once: keep the first source
    model.metadata_props.add(key=SOURCE_OPSET_KEY, value=str(opset))


SOURCE_OPSET_KEY = "kernbench.source_opset"
__all__ = ["MAX_OPSET", "MIN_OPSET", "SOURCE_OPSET_KEY", "load_model", "prepare_model"]


def _one_line(e: BaseException) -> str:
    s = " ".join(str(e).split())
    return s[:400] + ("..." if len(s) > 400 else "")
