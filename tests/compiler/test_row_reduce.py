"""One PE adds up a one-row split-K GEMM and runs the norm after it (ADR-0733).

A decode step's block tail, one row: FC1 → GELU → FC2 → residual ADD → LayerNorm → a
GEMM reading the norm. FC2 is split K; every part stores its partial sum, one reducer
loads all of them with one DMA, adds them, runs the epilogue, the residual add, the norm
and its quantize, and stores the row and its int8 copy. The program stays exact (against
the interpreter) and runs faster than with an owner per output tile.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernbench.cmdq.io import unfused
from kernbench.compiler.lower import gemm_parts, gemm_rowreduce
from kernbench.compiler.tiling import GemmTiles
from kernbench.components.builtin.pe_gemm import gemm_cycles
from kernbench.config.load import load_topology_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_split_k import _run as split_k_run  # noqa: E402


def _tail(path: Path, d: int, f: int, norm: str = "LayerNormalization") -> None:
    """r = x + gelu(x @ W1) @ W2 (or x + x @ W2 when f is 0), z = norm(r) @ W3; outputs
    r and z, one row."""
    rng = np.random.default_rng(5)
    w = lambda *s: numpy_helper.from_array(  # noqa: E731
        (rng.standard_normal(s) * 0.03).astype(np.float32))
    inits = []
    nodes = []
    if f:
        inits += [w(d, f), w(f, d)]
        inits[-2].name, inits[-1].name = "w1", "w2"
        nodes += [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
                  helper.make_node("Gelu", ["h"], ["a"], name="gelu"),
                  helper.make_node("MatMul", ["a", "w2"], ["m"], name="fc2")]
    else:
        inits.append(w(d, d))
        inits[-1].name = "w2"
        nodes.append(helper.make_node("MatMul", ["x", "w2"], ["m"], name="proj"))
    gamma = numpy_helper.from_array((1 + rng.standard_normal(d) * 0.1).astype(np.float32),
                                    "gamma")
    beta = numpy_helper.from_array((rng.standard_normal(d) * 0.1).astype(np.float32), "beta")
    w3 = w(d, d)
    w3.name = "w3"
    inits += [gamma, w3]
    norm_in = ["r", "gamma"]
    if norm == "LayerNormalization":
        inits.append(beta)
        norm_in.append("beta")
    nodes += [helper.make_node("Add", ["x", "m"], ["r"], name="residual"),
              helper.make_node(norm, norm_in, ["n"], name="norm", axis=-1, epsilon=1e-5),
              helper.make_node("MatMul", ["n", "w3"], ["z"], name="fc3")]
    g = helper.make_graph(
        nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, d]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, d])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)],
                                ir_version=10), path)


def _run(model: Path, out: Path) -> tuple[dict, list[dict], dict[str, str]]:
    """stats, unfused program and {IR node id: op type} of a verified run (exact against
    the interpreter: `test_split_k._run`)."""
    stats = split_k_run(model, out)
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    nodes = json.loads((out / "bundle" / "ir.json").read_text())["graph"]["nodes"]
    return stats, unfused(cmdq), {n["id"]: n["op_type"] for n in nodes}


def _layer(ops: dict[str, str], op_type: str, last: bool = False) -> str:
    ids = [i for i, t in ops.items() if t == op_type]
    return ids[-1] if last else ids[0]


@pytest.mark.parametrize("norm", ["LayerNormalization", "RMSNormalization"])
def test_the_down_projection_is_reduced_on_one_pe_with_the_norm(tmp_path, monkeypatch,
                                                                  norm):
    model = tmp_path / "tail.onnx"
    _tail(model, 768, 3072, norm)
    stats, cmdq, ops = _run(model, tmp_path / "reduced")
    norm_id = _layer(ops, "LAYER_NORM" if norm == "LayerNormalization" else "RMS_NORM")
    fc2 = [i for i, t in ops.items() if t == "GEMM"][1]
    mine = [e for e in cmdq if e.get("layer_id") == fc2]
    parts = [e for e in mine if e["opcode"] == "TE_GEMM_TILE"]
    # every part stores its int32 partial sum (the owners too); one DMA loads them all
    stores = [e for e in mine if e["opcode"] == "DMA_STORE_TILE" and e["qbits"] == 32]
    loads = [e for e in mine if e["opcode"] == "DMA_LOAD_TILE" and e["qbits"] == 32
             and e["tensor_role"] != "weight"]  # not the epilogue's scale and bias
    assert len(parts) > 24 and len(loads) == 1
    slots = loads[0]["num_elements"] // 768
    assert slots >= 2 and loads[0]["num_elements"] == slots * 768
    # each tile's parts fill its slots 0, 1, ... once (the rest stay at deployed zeros)
    base = loads[0]["dram_addr"]
    written: dict[int, list[int]] = {}
    for e in stores:
        assert e["num_elements"] == 32
        slot, n0 = divmod((e["dram_addr"] - base) // 4, 768)
        written.setdefault(n0, []).append(slot)
    assert sorted(written) == list(range(0, 768, 32))
    assert all(sorted(v) == list(range(len(v))) for v in written.values())
    assert max(len(v) for v in written.values()) == slots
    reducer = loads[0]["pe"]
    # (steps of one fused entry, which carries the layer id of its last step)
    adds = [e for e in cmdq if e["opcode"] == "VE_ELEMENTWISE_TILE" and e["op"] == "add"]
    assert len(adds) == slots - 1 and {e["pe"] for e in adds} == {reducer}
    # the norm runs on the reducer only, on the row in TCM: it loads nothing but its
    # parameters (a row op would load its input row)
    normed = [e for e in cmdq if e.get("layer_id") == norm_id]
    assert {e["pe"] for e in normed} == {reducer}
    assert all(e.get("tensor_role") == "weight" for e in normed
               if e["opcode"] == "DMA_LOAD_TILE")
    assert any(e["opcode"] in ("VE_LAYERNORM_TILE", "VE_RMSNORM_TILE") for e in normed)

    monkeypatch.setattr(gemm_rowreduce, "ROW_REDUCE", False)
    owners, cmdq_o, _ = _run(model, tmp_path / "owners")
    assert [e for e in cmdq_o if e.get("layer_id") == norm_id
            and e["opcode"] == "DMA_LOAD_TILE" and e.get("tensor_role") != "weight"]
    assert stats["total_ns"] < owners["total_ns"]


def test_an_unsplit_one_row_projection_is_split_for_the_reducer(tmp_path, monkeypatch):
    """The output projection's shape (1 × 768 × 768: 24 tiles, one K step each on 64 PEs)
    is split into K parts once one PE adds them up anyway (`split`)."""
    model = tmp_path / "proj.onnx"
    _tail(model, 768, 0)
    stats, cmdq, ops = _run(model, tmp_path / "split")
    proj = _layer(ops, "GEMM")
    te = [e for e in cmdq if e.get("layer_id") == proj and e["opcode"] == "TE_GEMM_TILE"]
    assert len(te) == 48 and {e["k"] for e in te} == {384}
    monkeypatch.setattr(gemm_rowreduce, "ROW_REDUCE", False)
    whole, cmdq_w, _ = _run(model, tmp_path / "whole")
    te_w = [e for e in cmdq_w if e.get("layer_id") == proj and e["opcode"] == "TE_GEMM_TILE"]
    assert len(te_w) == 24 and {e["k"] for e in te_w} == {768}
    assert stats["total_ns"] < whole["total_ns"]


def _lw(te_count: int = 1) -> SimpleNamespace:
    spec = load_topology_config("base").cube.pe_template.pe_gemm
    return SimpleNamespace(gemm_spec=spec, engines=SimpleNamespace(te_count=te_count),
                           bank=256 * 1024)


def _est(tiles: int, parts: int, tk: int, pes: int, engines: int = 1) -> int:
    """The split estimate in closed form: waves of one-step parts, array cycles plus a
    60-cycle command trip each."""
    spec = _lw().gemm_spec
    return -(-tiles * parts // (pes * engines)) * (gemm_cycles(spec, 1, 32, tk, 8) + 60)


@pytest.mark.parametrize("tiles,k,pes,engines", [(24, 768, 64, 1), (128, 4096, 64, 1),
                                                 (24, 768, 16, 1), (24, 768, 64, 2),
                                                 (6, 3072, 64, 1), (512, 1024, 64, 1)])
def test_split_takes_the_fastest_estimate(tiles, k, pes, engines):
    t = GemmTiles(1, 32, k, 1)
    got = gemm_parts.split(_lw(engines), t, tiles, k, 8, pes)
    cands = {1: _est(tiles, 1, k, pes, engines)}
    for ks in range(2, gemm_parts.MAX_PARTS + 1):
        tk = -(-k // (ks * 32)) * 32  # K / ks rounded up to whole 32-row steps
        if ks * tiles * 32 * 4 > 256 * 1024:
            break  # every slot of the row in one TCM bank
        if tk < k and -(-k // tk) == ks:
            cands[ks] = _est(tiles, ks, tk, pes, engines)
    best = min(cands, key=lambda ks: (cands[ks], ks))
    assert got.ks == best
    assert got.tk == (k if best == 1 else -(-k // (best * 32)) * 32)


def test_a_split_keeps_each_parts_tiles_within_a_tcm_bank():
    """A split part is one K step: on a long K (Llama-3.1-405B's MLP, K 53 248) the
    splits with few parts have weight tiles larger than a bank and are not taken."""
    from types import SimpleNamespace

    from kernbench.compiler.lower.gemm_parts import split
    from kernbench.compiler.tiling import GemmTiles
    from kernbench.topology import load_topology

    pt = load_topology("large").config.cube.pe_template
    bank = pt.pe_tcm.capacity_kib * 1024 // pt.pe_tcm.banks

    def parts(bank_bytes: int) -> GemmTiles:
        lw = SimpleNamespace(gemm_spec=pt.pe_gemm, bank=bank_bytes,
                             engines=SimpleNamespace(te_count=1))
        # 128 output tiles over 8 PEs: few, long parts are estimated fastest
        return split(lw, GemmTiles(tm=32, tn=128, tk=4096), 128, 53248, 8, 8, (1, 1))

    assert parts(1 << 30).tk * 128 > bank  # what the estimate alone picks
    out = parts(bank)
    assert out.ks > 1 and out.tk * out.tn <= bank and out.tm * out.tk <= bank
