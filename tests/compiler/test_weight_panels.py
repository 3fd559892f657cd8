"""TE weights stored as column panels as wide as the output tiles (ADR-0722).

A weight tile is then one contiguous DMA: its bytes on the wire are its bytes, where a
row-major [K, N] weight pays a padded burst per tile row. The panel layout is checked
against numpy slicing; whole programs against the IR interpreter (exact) and onnxruntime.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from kernbench.cli import main
from kernbench.compiler.lower.te_weights import panel_width, panels
from kernbench.compiler.lower.values import TeWeight, WeightValues
from kernbench.components.builtin.pe_dma import wire_bytes

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from models import single_gemm  # noqa: E402


@pytest.mark.parametrize(("k", "nn", "panel"), [(96, 200, 32), (64, 64, 16), (7, 33, 8)])
def test_a_tile_is_one_contiguous_run_of_its_panel(k, nn, panel):
    w = np.arange(k * nn, dtype=np.int32).reshape(k, nn)
    flat = panels(w, panel)
    assert sorted(flat.tolist()) == list(range(k * nn))  # a permutation: nothing lost
    for n0 in range(0, nn, panel):
        width = min(panel, nn - n0)
        for k0, tk in [(0, k), (k // 3, k - k // 3), (k - 1, 1)]:
            off = n0 * k + k0 * width  # where te_weights.weight_tile reads the tile
            np.testing.assert_array_equal(flat[off:off + tk * width].reshape(tk, width),
                                          w[k0:k0 + tk, n0:n0 + width])


def test_panel_width_keeps_row_major_where_panels_do_not_help_or_fit():
    def wp(nn: int, dtype: str) -> TeWeight:
        return TeWeight(None, None, 8, values=WeightValues("w", None, dtype, (64, nn), None))
    assert panel_width(wp(256, "int8"), 32) == 32
    assert panel_width(wp(32, "int8"), 32) == 0       # one panel is the row-major layout
    assert panel_width(wp(256, "int4"), 32) == 32
    assert panel_width(wp(255, "int4"), 32) == 0      # an odd last panel: half bytes
    # a weight given by its placement only (a convolution's) keeps its layout
    assert panel_width(TeWeight(None, None, 8), 32) == 0


def _run(tmp_path: Path, model: onnx.ModelProto, weight: str) -> list[dict]:
    """The program of `model` run on `small` at 8-bit activations and `weight` (a QConfig
    field), verified: exact against the interpreter, and within tolerance of onnxruntime."""
    path = tmp_path / "mm.onnx"
    onnx.save(model, path)
    q = tmp_path / "q.yaml"
    q.write_text(f'overrides:\n  - {{match: "*", activation: 8, {weight}}}\n')
    out = tmp_path / "out"
    assert main(["run", str(path), "-t", "small", "--qconfig", str(q), "--verify",
                 "--keep-bundle", "--no-trace", "--no-report", "--quiet",
                 "--out", str(out)]) == 0
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and "interpreter" in {c["reference"] for c in v["checks"]}
    assert all(c["max_abs_err"] == 0 for c in v["checks"] if c["reference"] == "interpreter")
    return json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]


@pytest.mark.parametrize("wbits", [8, 4])
def test_weight_tiles_move_only_their_bytes_and_the_program_stays_exact(tmp_path, wbits):
    # 200 columns: the last panel is 8 wide
    cmdq = _run(tmp_path, single_gemm(40, 200, 96, seed=3), f"weight: {wbits}")
    te = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE"]
    assert te and {e["qbits_weight"] for e in te} == {wbits}
    loads = [e for e in cmdq if e["opcode"] == "DMA_LOAD_TILE" and e["tensor_role"] == "weight"
             and e["qbits"] == wbits]
    assert sum(e["num_elements"] for e in loads) == sum(e["k"] * e["n"] for e in te)
    for e in loads:  # one contiguous run a tile: no padded burst per row
        nbytes = e["num_elements"] * wbits // 8
        assert "stride_bytes" not in e and wire_bytes(64, nbytes, 1) - nbytes < 64


@pytest.mark.parametrize(("m", "chunked"), [(1, True), (8, True), (40, False)])
def test_one_row_tiles_load_their_weights_in_chunks(tmp_path, m, chunked):
    """(ADR-0731, ADR-1080) A decode GEMM's weight (at most CHUNKED_MAX_ROWS rows) moves
    in DMAs of WEIGHT_CHUNK_BYTES here, each one contiguous run into its rows of the
    tile's buffer; tiles of more rows keep one DMA. Exact either way."""
    from kernbench.compiler.lower.te_weights import WEIGHT_CHUNK_BYTES
    # 768 × 32 int8 = 24 KiB a tile
    cmdq = _run(tmp_path, single_gemm(m, 64, 768, seed=5), "weight: 8")
    te = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE"]
    loads = [e for e in cmdq if e["opcode"] == "DMA_LOAD_TILE" and e["tensor_role"] == "weight"
             and e["qbits"] == 8]
    assert sum(e["num_elements"] for e in loads) == sum(e["k"] * e["n"] for e in te)
    biggest = max(e["num_elements"] for e in loads)
    assert (biggest <= WEIGHT_CHUNK_BYTES) == chunked
    assert (len(loads) > len(te)) == chunked
    # each PE's weight loads, in program order, are runs landing back to back in one
    # buffer, each run exactly one tile (k × n bytes at 8 bits)
    runs: list[list[dict]] = []
    for e in sorted(loads, key=lambda e: (e["pe"], e["id"])):
        prev = runs[-1][-1] if runs else None
        if prev is not None and prev["pe"] == e["pe"] and (prev["spm_bank"], prev[
                "spm_offset"] + prev["num_elements"]) == (e["spm_bank"], e["spm_offset"]) \
                and sum(x["num_elements"] for x in runs[-1]) < te[0]["k"] * te[0]["n"]:
            runs[-1].append(e)
        else:
            runs.append([e])
    assert len(runs) == len(te)
    assert all(sum(x["num_elements"] for x in r) == te[0]["k"] * te[0]["n"] for r in runs)
