"""Seeded fuzzing of the CLI (bounded in cases and time): mutated CMDQ programs, random
topology overrides and small random ONNX graphs never end in a traceback or a hang —
always exit 0 or exit 2 with one `error:` line (docs/errors.md)."""

from __future__ import annotations

import contextlib
import copy
import json
import random
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPEC = json.loads((ROOT / "tests" / "cmdq" / "data" / "spec_example.json").read_text())
CASE_SECONDS = 60  # a hang is a failure, not a stuck suite


class Hang(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def fire(*_: object) -> None:
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_cli(capsys, args: list[str]) -> tuple[int, str]:  # noqa: ANN001
    with deadline(CASE_SECONDS):
        code = main(args)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, f"{args}\n{err[-3000:]}"
    assert code in (0, 2), f"{args}: exit {code}\n{err[-2000:]}"
    if code == 2:
        assert sum(ln.startswith("error:") for ln in err.splitlines()) >= 1, err
    return code, err


# ---------------------------------------------------------------- CMDQ programs
VALUES = [0, -1, 1, 3, 7, 64, 4096, 2**31, 2**63, -(2**40), 1.5, float("nan"), "x", None,
          [], {}, [0, 1], True]


def mutate(rng: random.Random, prog: dict) -> dict:
    p = copy.deepcopy(prog)
    entries = p["cmdq"]
    for _ in range(rng.randint(1, 3)):
        e = rng.choice(entries)
        op = rng.random()
        if op < 0.4 and e:
            e[rng.choice(sorted(e))] = rng.choice(VALUES)
        elif op < 0.55 and e:
            del e[rng.choice(sorted(e))]
        elif op < 0.7:
            e["opcode"] = rng.choice(["VE_ROPE_TILE", "NOPE", "BARRIER", "END", "TE_CONV_TILE",
                                      "VE_LAYER_OP", "DMA_LOAD_TILE"])
        elif op < 0.8:
            entries.insert(rng.randrange(len(entries) + 1), copy.deepcopy(rng.choice(entries)))
        elif op < 0.9 and len(entries) > 1:
            entries.pop(rng.randrange(len(entries)))
        else:
            e["deps_before"] = [rng.randint(-2, len(entries) + 2)]
    return p


@pytest.mark.parametrize("seed", range(24))
def test_fuzz_cmdq(tmp_path, capsys, seed):
    rng = random.Random(seed)
    f = tmp_path / "prog.json"
    f.write_text(json.dumps(mutate(rng, SPEC), allow_nan=True))
    v, _ = run_cli(capsys, ["validate", str(f)])
    s, _ = run_cli(capsys, ["simulate", str(f), "--quiet", "--no-report", "--out",
                            str(tmp_path / "o")])
    assert (v == 0) == (s == 0), f"validate exit {v} but simulate exit {s}"


# ---------------------------------------------------------------- topology overrides
KEYS = ["cube.mesh.rows", "cube.mesh.cols", "sip.count", "sip.cubes.rows",
        "cube.router.hop_latency_ns", "cube.router.link_bw_gbs", "cube.hbm_ctrl.channels",
        "cube.hbm_ctrl.capacity_gib", "cube.pe_template.pe_tcm.capacity_kib",
        "cube.pe_template.pe_tcm.banks", "cube.pe_template.pe_gemm.rows",
        "cube.pe_template.pe_gemm.dataflow", "cube.pe_template.pe_math.op_cycles",
        "cube.pe_template.pe_math.op_cycles.exp", "cube.pe_template.pe_dma.burst_bytes",
        "cube.m_cpu.issue_window", "cube.pe_layout", "cube.m_cpu.router", "name", "extends"]
RAW = ["0", "-1", "1", "2", "3", "16", "1e30", ".inf", ".nan", "abc", "[]", "{}", "[r0c0]",
       "{exp: 2}", "999999999", "ws", "true", "''", "[r9c9, r0c0]", "small"]


@pytest.mark.parametrize("seed", range(24))
def test_fuzz_topology_overrides(tmp_path, capsys, seed):
    rng = random.Random(1000 + seed)
    sets = [f"{rng.choice(KEYS)}={rng.choice(RAW)}" for _ in range(rng.randint(1, 3))]
    args = [a for s in sets for a in ("--set", s)]
    code, _ = run_cli(capsys, ["topology", "show", "small", *args])
    if code == 0:  # an accepted topology also simulates (or refuses the program cleanly)
        run_cli(capsys, ["simulate", str(ROOT / "tests" / "cmdq" / "data" / "spec_example.json"),
                         "--quiet", "--no-report", "--out", str(tmp_path / "o"), *args])


# ---------------------------------------------------------------- small ONNX graphs
UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Sqrt", "Erf"]
BINARY = ["Add", "Mul", "Sub", "Div", "MatMul"]


def random_graph(rng: random.Random) -> onnx.ModelProto:
    """A chain of 1-5 ops on a [1, s, d] float input; sometimes with a wrong shape."""
    s, d = rng.choice([1, 4, 8]), rng.choice([4, 8, 16])
    x = "x"
    nodes, inits = [], []
    cur = x
    for i in range(rng.randint(1, 5)):
        out = f"t{i}"
        if rng.random() < 0.5:
            nodes.append(helper.make_node(rng.choice(UNARY), [cur], [out]))
        else:
            op = rng.choice(BINARY)
            n = d if op != "MatMul" else rng.choice([d, d, d + 1])  # d + 1: a bad shape
            shape = (d, rng.choice([d, 4])) if op == "MatMul" else (n,)
            if op == "MatMul":
                shape = (n, d)
            w = np.random.default_rng(rng.randint(0, 99)).standard_normal(shape)
            inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
            nodes.append(helper.make_node(op, [cur, f"w{i}"], [out]))
        cur = out
    g = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info(x, TensorProto.FLOAT,
                                                                        [1, s, d])],
                          [helper.make_tensor_value_info(cur, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("seed", range(12))
def test_fuzz_onnx_graphs(tmp_path, capsys, seed):
    rng = random.Random(2000 + seed)
    f = tmp_path / "m.onnx"
    f.write_bytes(random_graph(rng).SerializeToString())
    run_cli(capsys, ["run", str(f), "--quiet", "--no-report", "--out", str(tmp_path / "o")])
