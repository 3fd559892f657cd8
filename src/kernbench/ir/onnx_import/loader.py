"""Load an ONNX model safely: size cap, external data confined to the model's folder,
onnx.checker (full) and strict shape inference. Every failure is an InputError."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
from onnx import external_data_helper

from kernbench.errors import MAX_MODEL_BYTES, InputError, check_input_file
from kernbench.ir.onnx_import.light import inferred_shapes, light_model
from kernbench.ir.onnx_import.opset import MAX_OPSET, MIN_OPSET, default_opset, normalize_opset


def load_model(path: str | Path) -> onnx.ModelProto:
    """Read, check and shape-infer `path`; returns the inferred ModelProto."""
    path = Path(path)
    f = str(path)
    check_input_file(path, MAX_MODEL_BYTES)  # a regular file (never a FIFO), bounded
    try:
        model = onnx.load(f, load_external_data=False)
    except Exception as e:  # DecodeError, truncated protobuf, ...
        raise InputError(f"not a valid ONNX protobuf ({_one_line(e)})", file=f) from None
    _check_external_data(model, path)
    try:
        external_data_helper.load_external_data_for_model(model, str(path.parent.resolve()))
    except Exception as e:
        raise InputError(f"cannot load external data ({_one_line(e)})", file=f) from None
    return prepare_model(model, file=f)


def copy_with_external_data(src: str | Path, dst: str | Path) -> None:
    """Copy an ONNX model file and the external data files it references (paths kept
    relative to the model, so onnxruntime finds them beside the copy). The references
    were confined to the model's folder when the model was loaded."""

    src, dst = Path(src), Path(dst)
    shutil.copyfile(src, dst)
    model = onnx.load(str(src), load_external_data=False)
    base, out = src.parent.resolve(), dst.parent.resolve()
    seen: set[str] = set()
    for t in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(t):
            continue
        loc = external_data_helper.ExternalDataInfo(t).location or ""
        target = (base / loc).resolve()
        if loc in seen or Path(loc).is_absolute() or not target.is_relative_to(base):
            continue
        seen.add(loc)
        (out / loc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, out / loc)


def _check_external_data(model: onnx.ModelProto, path: Path) -> None:
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


def prepare_model(model: onnx.ModelProto, *, file: str | None = None) -> onnx.ModelProto:
    """Opset normalisation (opset.py), onnx.checker, strict shape inference with data
    propagation. The returned model carries `source_opset` in its metadata_props."""
    source = default_opset(model)
    model = normalize_opset(model, file=file)
    _set_source_opset(model, source)
    light = light_model(model)  # the weights left out: they decide no check, no shape
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
