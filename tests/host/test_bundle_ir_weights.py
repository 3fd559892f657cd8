"""A bundle's IR weights that are initializers of its model copy are not written twice
(`ir_weights_model.json` names them, `ir.bundle_ir` reads them back from model.onnx): the
bundle's IR is the compiled IR, weight for weight, and nothing of a model rewritten since
it was read is taken from it."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from kernbench.errors import InputError
from kernbench.host.bundle_check import check_bundle
from kernbench.host.flow import compile_loaded, compile_model
from kernbench.ir import import_onnx
from kernbench.ir.bundle_ir import IR_WEIGHTS_IN_MODEL, load_bundle_ir
from kernbench.topology import load_topology

MODELS = Path(__file__).resolve().parents[1] / "models"


def _npz_members(path: Path) -> set[str]:
    with zipfile.ZipFile(path) as z:
        return {n.removesuffix(".npy").replace("\u2215", "/") for n in z.namelist()}


def _same_weights(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert x.tobytes() == y.tobytes(), k


def test_the_bundle_ir_is_the_compiled_ir_and_model_weights_are_written_once(tmp_path):
    topo = load_topology("small")
    model = tmp_path / "gpt2.onnx"
    shutil.copyfile(MODELS / "gpt2.onnx", model)
    state, _ = compile_model(model, topo, tmp_path / "b")
    listing = json.loads((tmp_path / "b" / IR_WEIGHTS_IN_MODEL).read_text())
    names = listing["initializers"]
    assert listing["model"] == "model.onnx" and names
    # what the listing names is not in ir_weights.npz, and everything else is
    assert _npz_members(tmp_path / "b" / "ir_weights.npz") == set(state.graph.weights) - set(names)
    # each listed weight is that initializer of the source model (or the slice of it the
    # QKV fusion cut), byte for byte, taken here with numpy's own indexing
    inits = {t.name: onnx.numpy_helper.to_array(t)
             for t in onnx.load(str(model)).graph.initializer}
    slices = 0
    for tid, src in names.items():
        if isinstance(src, str):
            want = inits[src]
        else:
            slices += 1
            w = inits[src["initializer"]]
            want = w[:, src["start"]:src["stop"]] if src["axis"] == 1 \
                else w[src["start"]:src["stop"]]
        got = np.asarray(state.graph.weights[tid])
        assert got.shape == want.shape and got.tobytes() == want.tobytes(), tid
    assert slices == 6  # the one attention block's q, k, v weights and biases
    _same_weights(load_bundle_ir(tmp_path / "b").weights, state.graph.weights)
    assert check_bundle(tmp_path / "b", topo) == []


def test_a_model_rewritten_after_it_was_read_gives_every_weight_to_ir_weights(tmp_path):
    topo = load_topology("small")
    model = tmp_path / "gpt2.onnx"
    shutil.copyfile(MODELS / "gpt2.onnx", model)
    graph = import_onnx(model)
    st = model.stat()
    onnx.save(onnx.load(str(model)), str(model))  # the same content, rewritten in place
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    state, _ = compile_loaded(graph, model, topo, tmp_path / "b")
    assert not (tmp_path / "b" / IR_WEIGHTS_IN_MODEL).exists()
    assert _npz_members(tmp_path / "b" / "ir_weights.npz") == set(state.graph.weights)
    _same_weights(load_bundle_ir(tmp_path / "b").weights, state.graph.weights)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["initializers"].update({next(iter(d["initializers"])): "no_such"}),
     "initializer 'no_such' is not in model.onnx"),
    (lambda d: d.update(model="../model.onnx"), "expected"),
    (lambda d: d["initializers"].update({"no_such_tensor": "x"}), "not a constant tensor"),
    (lambda d: [v.update(stop=v["stop"] + 10**6) for v in d["initializers"].values()
                if isinstance(v, dict)], "outside its"),
    (lambda d: [v.update(axis="1") for v in d["initializers"].values() if isinstance(v, dict)],
     "expected"),
])
def test_a_tampered_listing_is_one_input_error(tmp_path, edit, message):
    b = tmp_path / "b"
    compile_model(MODELS / "gpt2.onnx", load_topology("small"), b)
    doc = json.loads((b / IR_WEIGHTS_IN_MODEL).read_text())
    edit(doc)
    (b / IR_WEIGHTS_IN_MODEL).write_text(json.dumps(doc))
    with pytest.raises(InputError, match=message) as e:
        load_bundle_ir(b)
    assert IR_WEIGHTS_IN_MODEL in str(e.value)


def test_a_missing_model_copy_is_one_input_error(tmp_path):
    b = tmp_path / "b"
    compile_model(MODELS / "gpt2.onnx", load_topology("small"), b)
    (b / "model.onnx").unlink()
    with pytest.raises(InputError, match="model.onnx, which is missing"):
        load_bundle_ir(b)
