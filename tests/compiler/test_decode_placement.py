"""Decode placement on a multi-cube NPU (docs/compiler.md "Where data lives").

A decode step reads every weight once for one row and its whole KV cache: the GEMMs of one
row spread over every cube when the tensor engines' real cycles say so (a one-row tile
costs its array folds, not its MACs at the peak rate), each PE reading the weight from its
own cube's copy; the present KV cache is spread over the cubes by rows (heads), its
KV_UPDATE blocks write in the cube that holds their rows and attention reads its K / V
there. These tests check where the traffic goes and that the data is still exact.
"""

from __future__ import annotations

import json

from tiny_ir import compile_until, gemm_graph

from kernbench.cli import main
from kernbench.compiler.lower.kv_update import CHUNK_BYTES
from kernbench.compiler.schedule import Scheduler
from kernbench.compiler.tilegraph import Buf, TileOp
from kernbench.topology import load_topology


def _cube_of_pe() -> tuple[list[int], int]:
    topo = load_topology("base")
    return [pe.cube.index for pe in topo.pes], topo.cubes[0].hbm_bytes


def test_one_row_gemm_spreads_and_reads_weights_in_its_own_cube():
    # m = 1: 72 array-wide tiles of 829 cycles each. On cube 0's 16 PEs that is 5 waves;
    # on all 64 PEs 2 waves plus the remote start: the GEMM spreads over every cube
    g, feeds = gemm_graph(m=1, k=768, n=2304)
    state = compile_until(g, feeds, "tiling", topology="base")
    cube_of_pe, cube_bytes = _cube_of_pe()
    ops = state.tiles.ops
    te_cubes = {cube_of_pe[o.pe] for o in ops if o.opcode == "TE_GEMM_TILE"}
    assert te_cubes == {0, 1, 2, 3}
    weight_loads = [o for o in ops if o.opcode == "DMA_LOAD_TILE"
                    and o.fields["tensor_role"] == "weight"]
    assert len(weight_loads) >= 72
    for o in weight_loads:  # each PE streams its columns from its own cube's HBM
        assert o.fields["dram_addr"] // cube_bytes == cube_of_pe[o.pe], o


def test_small_one_row_gemm_stays_in_one_cube():
    # 4 tiles: one wave on cube 0's PEs already; spreading only adds the remote start
    g, feeds = gemm_graph(m=1, k=256, n=128)
    state = compile_until(g, feeds, "tiling", topology="base")
    cube_of_pe, _ = _cube_of_pe()
    assert {cube_of_pe[o.pe] for o in state.tiles.ops if o.opcode == "TE_GEMM_TILE"} == {0}


def test_decode_kv_cache_spread_and_exact(tmp_path, capsys):
    out = tmp_path / "o"
    code = main(["run", "gpt2", "--seq-len", "1", "--kv-len", "2048", "-t", "base", "--all-pes",
                 "--verify", "--keep-bundle", "--quiet", "--no-report", "--out", str(out)])
    assert code == 0, capsys.readouterr().err[-2000:]
    v = json.loads((out / "verification.json").read_text())
    interp = {c["reference"]: c for c in v["checks"]}["interpreter"]
    assert interp["ok"] and interp["max_abs_err"] == 0.0
    mem = json.loads((out / "bundle" / "memory.json").read_text())
    caches = {k: a for k, a in mem["tensors"].items() if k.startswith("present.")}
    assert caches and all(len(a["parts"]) == 4 for a in caches.values())
    cube_of_pe, cube_bytes = _cube_of_pe()
    runs = [(addr, addr + nb) for a in caches.values() for _, nb, addr in a["parts"]]
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    stores = loads = new_rows = 0
    for e in cmdq:
        if e["opcode"] not in ("DMA_STORE_TILE", "DMA_LOAD_TILE") \
                or not any(lo <= e["dram_addr"] < hi for lo, hi in runs):
            continue
        if e["layer_id"].startswith("qkv_proj"):
            # the projection stores the new rows itself (ADR-0721)
            assert e["opcode"] == "DMA_STORE_TILE", e
            new_rows += e["num_elements"]
            continue
        # KV_UPDATE writes its rows and attention reads its K / V in the PE's own cube
        assert e["dram_addr"] // cube_bytes == cube_of_pe[e["pe"]], e
        stores += e["opcode"] == "DMA_STORE_TILE"
        loads += e["opcode"] == "DMA_LOAD_TILE"
    assert stores >= 2 * 4 * 4 and loads >= 2 * 4 * 2  # 2 layers × K, V × 4 heads
    # one new row of every head of K and V in each cache: heads × head size elements
    assert new_rows == sum(a["shape"][1] * a["shape"][3] for a in caches.values())


def _kv_update_loads(tmp_path, kv_len: int) -> tuple[dict, list[dict]]:
    out = tmp_path / "b"
    assert main(["compile", "gpt2", "--seq-len", "1", "--kv-len", str(kv_len), "-t", "base",
                 "--all-pes", "--quiet", "-o", str(out)]) == 0
    cmdq = json.loads((out / "cmdq.json").read_text())["cmdq"]
    loads: dict[str, dict[int, list[int]]] = {}
    for e in cmdq:
        if e["opcode"] == "DMA_LOAD_TILE" and e["layer_id"].startswith("kv_update"):
            loads.setdefault(e["layer_id"], {}).setdefault(e["pe"], []).append(
                e["num_elements"])
    return loads, cmdq


def test_kv_update_copies_the_past_in_even_blocks(tmp_path):
    # 200 past rows a head do not divide into 64-row blocks per head (64, 64, 64, 8): the
    # past of the heads in one cube is one run cut into even blocks, so no PE copies
    # several times what another does. The new rows are the projection's (ADR-0721): the
    # KV_UPDATE loads past rows only, each block in chunks of at most CHUNK_BYTES
    loads, _ = _kv_update_loads(tmp_path, 200)
    assert loads
    for layer, per_pe in loads.items():
        assert len(per_pe) >= 4, layer
        total = [sum(sizes) for sizes in per_pe.values()]
        assert max(total) <= 1.25 * min(total), (layer, total)
        assert sum(total) == 200 * 64  # every past row once (gpt2: 4 heads of 16)
        assert max(max(s) for s in per_pe.values()) * 4 <= CHUNK_BYTES, layer


def test_a_prefetched_weight_waits_for_the_earlier_layers_data_load_on_its_pe():
    # the PE's DMA read channel is first come first served: a prefetch of a later layer's
    # weights is released only after the data load of an earlier layer it would overtake
    ve = TileOp("VE_ADD_TILE", 0, "a", {}, writes=[("out", Buf(0, 0, 64, "t"))])
    store = TileOp("DMA_STORE_TILE", 1, "a", {}, hbm_writes=[("x", 0, 64, 64, 64)])
    data = TileOp("DMA_LOAD_TILE", 0, "b", {}, writes=[("spm", Buf(1, 0, 64, "x"))],
                  hbm_reads=[("x", 0, 64, 64, 64)])
    weight = TileOp("DMA_LOAD_TILE", 0, "c", {}, writes=[("spm", Buf(2, 0, 64, "w"))],
                    hbm_reads=[("w", 0, 64, 64, 64)])
    other_pe = TileOp("DMA_LOAD_TILE", 2, "c", {}, writes=[("spm", Buf(3, 2, 64, "w"))],
                      hbm_reads=[("w", 64, 128, 64, 64)])
    ops = [ve, store, data, weight, other_pe]
    for i, o in enumerate(ops):
        o.index = i
    Scheduler().feed(ops)
    assert data.deps == [1]       # it waits for the store of what it reads
    assert weight.deps == [2]     # the constant waits for the data load ahead of it
    assert other_pe.deps == []    # on a PE with no such load it runs ahead freely


def test_a_past_kv_load_does_not_wait_for_the_earlier_layers_data_load():
    # the past KV cache is read by the KV_UPDATE the attention waits for: held behind the
    # QKV projection's data load on its PE, it would join a chain it does not depend on
    ve = TileOp("VE_ADD_TILE", 0, "a", {}, writes=[("out", Buf(0, 0, 64, "t"))])
    store = TileOp("DMA_STORE_TILE", 1, "a", {}, hbm_writes=[("x", 0, 64, 64, 64)])
    data = TileOp("DMA_LOAD_TILE", 0, "b", {}, writes=[("spm", Buf(1, 0, 64, "x"))],
                  hbm_reads=[("x", 0, 64, 64, 64)])
    past = TileOp("DMA_LOAD_TILE", 0, "c", {"tensor_role": "kv"},
                  writes=[("spm", Buf(2, 0, 64, "p"))], hbm_reads=[("past", 0, 64, 64, 64)])
    weight = TileOp("DMA_LOAD_TILE", 0, "c", {"tensor_role": "weight"},
                    writes=[("spm", Buf(3, 0, 64, "w"))], hbm_reads=[("w", 0, 64, 64, 64)])
    ops = [ve, store, data, past, weight]
    for i, o in enumerate(ops):
        o.index = i
    Scheduler().feed(ops)
    assert data.deps == [1]
    assert past.deps == []        # free of the data load ahead of it
    assert weight.deps == [2]     # a weight of the same layer still waits for it
