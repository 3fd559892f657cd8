"""A weight-bound GEMM whose output rows are spread over the cubes runs on every PE
(ADR-1080): each cube keeping its own few rows would read the whole weight once per cube.
And a one-row tile's weight moves in at most `MAX_WEIGHT_CHUNKS` DMAs.

The program is checked against the IR interpreter (exact), the placement against the
estimate's two sides (`gemm_cubes.by_rows`) and the chunking against its closed form.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest

from kernbench.cli import main
from kernbench.compiler.lower.te_weights import MAX_WEIGHT_CHUNKS, WEIGHT_CHUNK_BYTES, chunk_rows
from kernbench.topology import load_topology

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from models import gpt_stack, single_gemm  # noqa: E402


def _run(tmp_path: Path, model: onnx.ModelProto, topology: str, *more: str) -> list[dict]:
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    out = tmp_path / "out"
    assert main(["run", str(path), "-t", topology, "--verify", "--keep-bundle", "--no-trace",
                 "--no-report", "--quiet", "--out", str(out), *more]) == 0
    v = json.loads((out / "verification.json").read_text())
    interp = {c["reference"]: c for c in v["checks"]}["interpreter"]
    assert interp["ok"] and interp["max_abs_err"] == 0.0
    return json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]


@pytest.mark.parametrize(("d", "topology", "every_pe"), [(1024, "large", True),
                                                      (512, "base", False)])
def test_a_few_rows_per_cube_take_every_pe_where_the_weight_bounds(tmp_path, d, topology,
                                                                   every_pe):
    # 32 rows on 4 cubes: 8 rows a cube. On `large` (128 × 128 arrays) a cube's 8 rows of
    # a d 1024 projection are bound by reading the whole weight: every GEMM takes every PE
    # over all 32 rows. On `base` (smaller arrays) the cubes are bound by their tensor
    # engines, so each keeps its own rows
    cmdq = _run(tmp_path, gpt_stack(n_layer=1, d=d, heads=8, seq=32), topology, "--all-pes")
    cube_of = [pe.cube.index for pe in load_topology(topology).pes]
    by_layer: dict[str, list[dict]] = {}
    for e in cmdq:
        if e["opcode"] == "TE_GEMM_TILE" and not e["layer_id"].startswith("attention"):
            by_layer.setdefault(e["layer_id"], []).append(e)
    assert len(by_layer) == 4  # QKV, output projection, FC1, FC2
    for es in by_layer.values():
        # a tile of more than 8 rows spans several cubes' rows
        assert (max(e["m"] for e in es) > 8) == every_pe
        assert {cube_of[e["pe"]] for e in es} == {0, 1, 2, 3}


def test_a_kept_cube_reads_the_whole_weight_so_the_estimate_weighs_it():
    from kernbench.compiler.lower import gemm_cubes as gemm

    class Lw:  # the Lowering facts the two estimates read
        topo = load_topology("base")
        n_pes = 64
        dma_bytes_per_cycle = 16.0
        ucie_bytes_per_cycle = 64.0
        gemm_spec = topo.config.cube.pe_template.pe_gemm

        class engines:  # noqa: N801
            te_count = 1

        @staticmethod
        def pes_of(cube):
            return 64 if cube is None else 16

    ranges = [(8 * c, 8 * c + 8, c) for c in range(4)]
    # a long weight read: every PE; a tiny weight with many rows a cube: keep the cubes
    assert not gemm.by_rows(Lw, "int8", "int8", ranges, 4096, 4096)
    ranges = [(256 * c, 256 * c + 256, c) for c in range(4)]
    assert gemm.by_rows(Lw, "int8", "int8", ranges, 64, 64)


@pytest.mark.parametrize(("tk", "row_bytes"), [(768, 32), (512, 32), (2048, 128),
                                               (7168, 128), (64, 8192), (3, 100000)])
def test_chunks_are_at_least_the_chunk_bytes_and_at_most_the_chunk_count(tk, row_bytes):
    per = chunk_rows(tk, row_bytes)
    chunks = -(-tk // per)
    per_8k = max(1, WEIGHT_CHUNK_BYTES // row_bytes)
    # never more DMAs than ADR-0731's 8 KiB rule asks, nor than the cap
    assert 1 <= chunks <= min(-(-tk // per_8k), MAX_WEIGHT_CHUNKS) or chunks == 1
    # every chunk but the last is at least 8 KiB (or one row)
    assert per >= per_8k


def test_gpt2_decode_tiles_keep_their_8k_chunks():
    # ADR-0731's tiles: 768 × 32 and 512 × 32 int8 (24 and 16 KiB) in 8 KiB DMAs
    assert chunk_rows(768, 32) * 32 == 8192 and chunk_rows(512, 32) * 32 == 8192
    # a Llama-size tile of 2048 × 128 (256 KiB): 4 DMAs of 64 KiB, not 32 of 8 KiB
    assert chunk_rows(2048, 128) == 512


def test_a_long_one_row_tile_moves_in_at_most_the_chunk_count_and_stays_exact(tmp_path):
    cmdq = _run(tmp_path, single_gemm(1, 64, 8192, seed=7), "small")
    te = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE"]
    loads = [e for e in cmdq if e["opcode"] == "DMA_LOAD_TILE" and e["tensor_role"] == "weight"
             and e["qbits"] == 8]
    assert sum(e["num_elements"] for e in loads) == sum(e["k"] * e["n"] for e in te)
    assert len(loads) <= MAX_WEIGHT_CHUNKS * len(te)
