"""Activations spread over the cubes (docs/compiler.md "Where data lives").

On a multi-cube NPU an intermediate with enough rows is split into one part per cube; the
tiles that produce and read those rows run in that cube. These tests check that the data
is right wherever it lives (exact against the interpreter, every layer), that tiles of a
spread tensor run where their rows are, and that a whole-layer op pins what it touches.
"""

from __future__ import annotations

import json

from kernbench.cli import main
from kernbench.compiler.hbm import ITEMSIZE
from kernbench.topology import load_topology


def test_spread_gpt2_is_exact_at_every_layer_on_four_cubes(tmp_path, capsys):
    out = tmp_path / "o"
    code = main(["run", "gpt2", "--seq-len", "256", "-t", "base", "--verify",
                 "--dump-intermediates", "--keep-bundle", "--quiet", "--out", str(out)])
    assert code == 0, capsys.readouterr().err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    interp = {c["reference"]: c for c in v["checks"]}["interpreter"]
    assert interp["ok"] and interp["max_abs_err"] == 0.0
    assert "first diverging layer" not in capsys.readouterr().out
    mem = json.loads((out / "bundle" / "memory.json").read_text())
    spread = {k: a for k, a in mem["tensors"].items() if a.get("parts")}
    # the residual stream, the int8 activations the norms store for the projections (their
    # float output is not stored: ADR-0719), the projections' V
    assert sum(k.startswith("add") for k in spread) >= 4
    assert any(k.endswith("@int8") for k in spread) and any(k.startswith("split") for k in spread)
    topo = load_topology("base")
    cube_of_pe = [pe.cube.index for pe in topo.pes]
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    _stores_land_in_their_own_cube(cmdq, spread, topo.cubes[0].hbm_bytes, cube_of_pe)


def _stores_land_in_their_own_cube(cmdq: list[dict], spread: dict, cube_bytes: int,
                                   cube_of_pe: list[int]) -> None:
    """Every tile store into a spread tensor writes the HBM of the storing PE's cube."""
    runs = [(addr, addr + nb) for a in spread.values() for _, nb, addr in a["parts"]]
    checked = 0
    for e in cmdq:
        if e["opcode"] != "DMA_STORE_TILE":
            continue
        a = e["dram_addr"]
        if any(lo <= a < hi for lo, hi in runs):
            assert a // cube_bytes == cube_of_pe[e["pe"]], e
            checked += 1
    assert checked > 100


def test_parts_tile_the_tensor_in_row_order():
    from kernbench.compiler.hbm import MIN_PART_BYTES, MemoryPlan

    plan = MemoryPlan(4, 1 << 24)
    a = plan.allocate("t", (1, 100, 384), "fp16", "intermediate", spread=True)
    # 100 rows over 4 cubes: 25 rows each, part c in cube c, offsets contiguous
    assert [(o, nb) for o, nb, _ in a.parts] == [(i * 25 * 384 * ITEMSIZE["fp16"],
                                                  25 * 384 * 2) for i in range(4)]
    assert [addr >> 24 for _, _, addr in a.parts] == [0, 1, 2, 3]
    # too few rows for every cube to get MIN_ROWS_PER_CUBE: one storage in cube 0
    small = plan.allocate("s", (1, 16, 24), "fp32", "intermediate", spread=True)
    assert not small.parts and small.addrs[0] < 1 << 24
    # rows enough, but parts smaller than MIN_PART_BYTES: not worth a remote cube
    rows = 64
    cols = MIN_PART_BYTES * 4 // (rows * 4) - 1
    thin = plan.allocate("u", (rows, cols), "fp32", "intermediate", spread=True)
    assert not thin.parts
    wide = plan.allocate("w", (rows, cols + 1), "fp32", "intermediate", spread=True)
    assert len(wide.parts) == 4 and all(nb == MIN_PART_BYTES for _, nb, _ in wide.parts)


def test_memory_json_parts_are_checked():
    from kernbench.host.bundle_check import check_memory

    good = {"tensors": {"t": {"role": "intermediate", "dtype": "fp32", "shape": [64, 4],
                              "nbytes": 1024, "address": 0, "replicas": [],
                              "parts": [[0, 512, 0], [512, 512, 4096]]}}, "views": {}}
    assert check_memory(good, 1 << 20, "memory.json") == []
    bad = json.loads(json.dumps(good))
    bad["tensors"]["t"]["parts"][1][0] = 256  # a gap / overlap in the tensor's bytes
    errs = check_memory(bad, 1 << 20, "memory.json")
    assert len(errs) == 1 and "parts" in str(errs[0])
