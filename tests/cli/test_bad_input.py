"""Bad input ends in one line naming the file / entry / field and the reason, exit 2,
nothing half-written (docs/errors.md). One test per case of issue 12."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from kernbench.cli import main
from kernbench.config import load_topology_config
from kernbench.config.schema import DEFAULT_MATH_OP_CYCLES, MAX_ROUTERS

ROOT = Path(__file__).resolve().parents[2]
GPT2 = ROOT / "tests" / "models" / "gpt2.onnx"


def _exit2(capsys, args: list[str]) -> str:  # noqa: ANN001
    code = main(args)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2, err[-1500:]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------- topology
def test_topology_not_utf8(tmp_path, capsys):
    f = tmp_path / "t.yaml"
    f.write_bytes(b"name: x\ncube:\n  mesh: {rows: 2}\n# \xff\xfe\n")
    line = _exit2(capsys, ["validate", str(f)])
    assert str(f) in line and "line 4" in line and "not UTF-8" in line


@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
@pytest.mark.parametrize("key", ["cube.router.hop_latency_ns", "cube.hbm_ctrl.channel_bw_gbs",
                                 "cube.pe_template.pe_math.op_cycles.exp"])
def test_topology_inf_nan_refused(capsys, key, value):
    line = _exit2(capsys, ["topology", "show", "small", "--set", f"{key}={value}"])
    assert f"field '{key}'" in line and "finite" in line


@pytest.mark.parametrize("sets", [["cube.mesh.rows=100000", "cube.mesh.cols=100000"],
                                  ["sip.count=1000000000"],
                                  ["sip.cubes.rows=4096", "sip.cubes.cols=4096"]])
def test_huge_topology_refused_fast(capsys, sets):
    t0 = time.perf_counter()
    line = _exit2(capsys, ["topology", "show", "small",
                           *[a for s in sets for a in ("--set", s)]])
    assert time.perf_counter() - t0 < 1.0
    assert "the limit is" in line


def test_limit_itself_builds_within_a_second():
    # a system at the router limit is accepted (and checked in well under a second)
    side = int(MAX_ROUTERS ** 0.5)
    t0 = time.perf_counter()
    cfg = load_topology_config("small", [f"cube.mesh.rows={side}", f"cube.mesh.cols={side}"])
    assert cfg.cube.mesh.rows == side and time.perf_counter() - t0 < 1.0


def test_partial_op_cycles_merges_with_defaults(tmp_path, capsys):
    cfg = load_topology_config("small", ["cube.pe_template.pe_math.op_cycles={exp: 9}"])
    table = cfg.cube.pe_template.pe_math.op_cycles
    assert table == {**DEFAULT_MATH_OP_CYCLES, "exp": 9.0}
    assert main(["run", str(GPT2), "--out", str(tmp_path / "o"), "--quiet", "--set",
                 "cube.pe_template.pe_math.op_cycles={gelu: 16}"]) == 0


# ---------------------------------------------------------------- files that never end
@pytest.fixture
def fifo(tmp_path) -> Path:
    p = tmp_path / "pipe.yaml"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
@pytest.mark.parametrize("slot", ["topology", "qconfig", "model", "cmdq", "inputs"])
def test_fifo_and_dev_zero_refused(request, tmp_path, capsys, special, slot):
    path = str(request.getfixturevalue("fifo")) if special == "fifo" else special
    out = str(tmp_path / "o")
    args = {"topology": ["run", str(GPT2), "-t", path, "--out", out],
            "qconfig": ["run", str(GPT2), "--qconfig", path, "--out", out],
            "model": ["run", path, "--out", out],
            "cmdq": ["simulate", path, "--out", out],
            "inputs": ["run", str(GPT2), "--inputs", path, "--out", out]}[slot]
    line = _exit2(capsys, args)
    assert path in line and "not a regular file" in line
    assert not Path(out).exists()
    assert _exit2(capsys, ["validate", path]).endswith("not a regular file (a device, FIFO or "
                                                       "socket)")


def test_oversized_qconfig_refused(tmp_path, capsys):
    q = tmp_path / "q.yaml"
    q.write_text("#" * (2 << 20))
    assert "larger than the limit" in _exit2(capsys, ["run", str(GPT2), "--qconfig", str(q),
                                                      "--out", str(tmp_path / "o")])


# ---------------------------------------------------------------- sizes and inputs
def test_seq_len_beyond_memory_refused(tmp_path, capsys):
    t0 = time.perf_counter()
    line = _exit2(capsys, ["run", "gpt2-small", "--seq-len", "100000", "--out",
                           str(tmp_path / "o")])
    assert "GiB of memory" in line and "limit" in line and "--seq-len 100000" in line
    assert time.perf_counter() - t0 < 5.0 and not (tmp_path / "o").exists()


def test_memory_limit_applies_to_model_files(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KERNBENCH_MEMORY_LIMIT_GIB", "0.0001")
    line = _exit2(capsys, ["run", str(GPT2), "--out", str(tmp_path / "o")])
    assert "0.0 GiB limit" in line and str(GPT2) in line


def _feeds() -> dict[str, np.ndarray]:
    with np.load(ROOT / "tests" / "models" / "gpt2.inputs.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("case", ["npy", "name", "extra", "shape", "dtype"])
def test_bad_inputs(tmp_path, capsys, case):
    feeds = _feeds()
    f = tmp_path / "in.npz"
    if case == "npy":
        f = tmp_path / "in.npy"
        np.save(f, feeds["input_ids"])
    elif case == "name":
        np.savez(f, ids=feeds["input_ids"])
    elif case == "extra":
        np.savez(f, **feeds, other=np.zeros(3))
    elif case == "shape":
        np.savez(f, input_ids=feeds["input_ids"][:, :3])
    else:
        np.savez(f, input_ids=feeds["input_ids"].astype(np.complex64))
    line = _exit2(capsys, ["run", str(GPT2), "--verify", "--inputs", str(f), "--out",
                           str(tmp_path / "o")])
    want = {"npy": ".npy", "name": "missing input(s) input_ids", "extra": "unknown input(s) "
            "other", "shape": "input 'input_ids': shape", "dtype": "dtype complex64"}[case]
    assert str(f) in line and want in line


def test_nan_in_inputs_warns_or_refused_with_strict(tmp_path, capsys):
    ids = tmp_path / "ids.npz"
    np.savez(ids, **_feeds())
    # a float input: the decode model's past keys
    with np.load(ROOT / "tests" / "models" / "gpt2_decode.inputs.npz") as z:
        feeds = {k: z[k] for k in z.files}
    key = next(k for k, v in feeds.items() if v.dtype.kind == "f")
    feeds[key] = feeds[key].copy()
    feeds[key].flat[0] = np.nan
    f = tmp_path / "nan.npz"
    np.savez(f, **feeds)
    model = str(ROOT / "tests" / "models" / "gpt2_decode.onnx")
    code = main(["run", model, "--inputs", str(f), "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 0 and f"warning: {f}: input '{key}': 1 NaN/Inf" in err
    line = _exit2(capsys, ["run", model, "--inputs", str(f), "--strict", "--out",
                           str(tmp_path / "o2")])
    assert f"input '{key}'" in line and "--strict" in line


def test_nan_in_weights_warns(tmp_path, capsys):
    m = onnx.load(str(GPT2))
    init = next(i for i in m.graph.initializer if i.data_type == onnx.TensorProto.FLOAT
                and len(i.dims) == 2)
    a = numpy_helper.to_array(init).copy()
    a[0, 0] = np.inf
    init.CopyFrom(numpy_helper.from_array(a, init.name))
    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    assert main(["compile", str(p), "--out", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "1 NaN/Inf" in err and "weight '" in err
    line = _exit2(capsys, ["compile", str(p), "--strict", "--out", str(tmp_path / "b2")])
    assert "weight '" in line and "NaN/Inf" in line


# ---------------------------------------------------------------- kernels
@pytest.mark.parametrize("case", ["syntax", "setup", "body"])
def test_kernel_file_errors_are_file_line(tmp_path, capsys, case):
    src = {"syntax": "import kernbench\ndef k(:\n    pass\n",
           "setup": ("import kernbench\n@kernbench.jit\ndef k(x):\n    pass\n\n"
                     "def setup():\n    return {'args': (1 / 0,)}\n"),
           "body": ("import kernbench\nimport kernbench.tl as tl\n@kernbench.jit\n"
                    "def k(x):\n    y = {}['missing']\n\n"
                    "def setup():\n    return {'args': (1,), 'grid': (1,)}\n")}[case]
    f = tmp_path / "kern.py"
    f.write_text(src)
    line = _exit2(capsys, ["kernel", f"{f}::k", "--out", str(tmp_path / "o")])
    want = {"syntax": f"{f}:2: SyntaxError", "setup": f"{f}:7: ZeroDivisionError",
            "body": f"{f}:5: KeyError"}[case]
    assert want in line


# ---------------------------------------------------------------- bundles
@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("b") / "bundle"
    assert main(["compile", str(GPT2), "-o", str(out), "--quiet"]) == 0
    return out


def _tamper(bundle: Path, tmp: Path, edit) -> Path:  # noqa: ANN001
    b = tmp / "tampered"
    shutil.copytree(bundle, b)
    mem = json.loads((b / "memory.json").read_text())
    edit(mem, b)
    (b / "memory.json").write_text(json.dumps(mem))
    return b


def _first_weight(mem: dict) -> str:
    return sorted(k for k, a in mem["tensors"].items() if a["role"] == "weight")[0]


@pytest.mark.parametrize("case", ["address", "overlap", "beyond", "missing_weight"])
def test_tampered_bundle_refused(bundle, tmp_path, capsys, case):
    key = []

    def edit(mem: dict, b: Path) -> None:
        w = _first_weight(mem)
        key.append(w)
        a = mem["tensors"][w]
        if case == "address":
            a["replicas"] = [x + 3 for x in a["replicas"]] or None
            a["address"] += 3
        elif case == "overlap":
            other = next(k for k in sorted(mem["tensors"]) if k != w
                         and mem["tensors"][k]["role"] == "intermediate")
            a["address"] = mem["tensors"][other]["address"]
            a["replicas"] = []
        elif case == "beyond":
            a["address"] = 1 << 45
            a["replicas"] = []
        else:
            with np.load(b / "weights.npz") as z:
                kept = {k: z[k] for k in z.files if k != w}
            np.savez(b / "weights.npz", **kept)

    b = _tamper(bundle, tmp_path, edit)
    line = _exit2(capsys, ["simulate", str(b), "--verify", "--out", str(tmp_path / "o")])
    assert "memory.json" in line and f"tensor '{key[0]}'" in line
    assert not (tmp_path / "o").exists()
    code = main(["validate", str(b)])
    err = capsys.readouterr().err
    assert code == 2 and f"tensor '{key[0]}'" in err and "Traceback" not in err


def test_validate_bundle_ok(bundle, capsys):
    assert main(["validate", str(bundle)]) == 0
    assert "consistent bundle" in capsys.readouterr().err


# ---------------------------------------------------------------- qconfig
def test_qconfig_glob_matching_nothing_warns(tmp_path, capsys):
    q = tmp_path / "q.yaml"
    q.write_text('overrides:\n  - match: "*no_such_layer*"\n    weight: 4\n')
    assert main(["compile", str(GPT2), "--qconfig", str(q), "--out", str(tmp_path / "b"),
                 "--quiet"]) == 0
    assert f"warning: {q}: override match '*no_such_layer*' matches no layer" in \
        capsys.readouterr().err
    line = _exit2(capsys, ["compile", str(GPT2), "--qconfig", str(q), "--strict", "--out",
                           str(tmp_path / "b2")])
    assert "*no_such_layer*" in line and "field 'overrides'" in line


@pytest.mark.parametrize("glob", ["gemm_18", "node_Gemm_344",
                                  "model.transformer.h.0.attn.c_proj/*"])
def test_qconfig_matches_ir_id_onnx_node_and_module_path(tmp_path, capsys, glob):
    q = tmp_path / "q.yaml"
    q.write_text(f'overrides:\n  - match: "{glob}"\n    weight: 4\n')
    out = tmp_path / "b"
    assert main(["compile", str(GPT2), "--qconfig", str(q), "--out", str(out), "--quiet"]) == 0
    assert "warning" not in capsys.readouterr().err
    ir = json.loads((out / "ir.json").read_text())
    bits = {n["id"]: n.get("qbits_weight") for n in ir["graph"]["nodes"]}
    assert bits["gemm_18"] == 4
    assert sum(b == 4 for b in bits.values()) == 1
