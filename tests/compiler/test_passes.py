"""Each compiler pass on a tiny IR built in the test, its output checked precisely against
numbers computed here (numpy, closed-form tile arithmetic), not against the compiler."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_ir import attention_graph, compile_until, gemm_graph

from kernbench.cmdq.hw import limits_for
from kernbench.cmdq.schema import CMDQ_VERSION
from kernbench.cmdq.validate import validate_document
from kernbench.compiler.order import Place
from kernbench.compiler.state import CompileState
from kernbench.compiler.tcm_alloc import AllocateTcm, _Ring
from kernbench.compiler.tilegraph import Buf, TileGraph, TileOp
from kernbench.errors import CapacityError
from kernbench.ir.verify import verify
from kernbench.topology import load_topology

SMALL = load_topology("small")
TCM = SMALL.config.cube.pe_template.pe_tcm
BANK = TCM.capacity_kib * 1024 // TCM.banks
ALLOCATABLE = (TCM.capacity_kib - TCM.reserved_kib) * 1024
ARRAY = SMALL.config.cube.pe_template.pe_gemm.rows


def _absmax_scale(x: np.ndarray) -> np.float32:
    """max|x| / 127 rounded up to 16 significant bits (ADR-0940), in exact fractions."""
    s = Fraction(float(np.max(np.abs(x.astype(np.float64))))) / 127
    e = 0
    while s >= Fraction(2) ** e:
        e += 1
    while s < Fraction(2) ** (e - 1):
        e -= 1
    step = Fraction(2) ** (e - 16)  # 2^(e-1) <= s < 2^e: 16 significant bits
    return np.float32(float(math.ceil(s / step) * step))


# ----------------------------------------------------------------------------- quantize


def test_quantize_gives_each_te_input_its_absmax_scale():
    g, feeds = gemm_graph()
    st = compile_until(g, feeds, "quantize")
    q = st.graph.tensors["x"].quant
    assert q is not None and q.dtype == "int8" and q.zero_point is None
    assert st.graph.weights[q.scale] == _absmax_scale(feeds["x"])
    assert st.graph.tensors["w"].quant is None  # weights are quantized by the tiling
    verify(st.graph)


def test_quantize_scales_attention_q_k_v_on_their_calibrated_values():
    g, feeds = attention_graph()
    st = compile_until(g, feeds, "quantize")
    for name in "qkv":
        bhsd = feeds[f"{name}_in"].transpose(0, 2, 1, 3)  # what the transpose produces
        assert st.graph.weights[f"{name}::act_scale"] == _absmax_scale(bhsd)


def test_quantize_leaves_a_float_graph_alone():
    g, feeds = gemm_graph(bits=None)
    before = g.to_json()
    st = compile_until(g, feeds, "quantize")
    assert st.graph.to_json() == before and st.notes == []


# ----------------------------------------------------------------------------- layout, memory


def test_layout_folds_head_transposes_around_attention():
    g, feeds = attention_graph()
    st = compile_until(g, feeds, "layout")
    assert st.folded == {"t_q": "read", "t_k": "read", "t_v": "read", "t_o": "write"}


def test_memory_places_folded_views_with_permuted_strides():
    g, feeds = attention_graph(b=1, s=8, hq=2, hkv=1, d=16)
    plan = compile_until(g, feeds, "memory").memory
    q = plan.placements["q"]
    # q_in is (1, 8, 2, 16) contiguous: strides (256, 32, 16, 1); q is its (0, 2, 1, 3) view
    assert (q.key, q.shape, q.strides) == ("q_in", (1, 2, 8, 16), (256, 16, 32, 1))
    o = plan.placements["o"]  # the attention writes straight into y's storage
    assert (o.key, o.shape, o.strides) == ("y", (1, 2, 8, 16), (256, 16, 32, 1))
    assert "o" not in plan.allocations and plan.allocations["y"].nbytes == 8 * 2 * 16 * 4


def test_memory_replicates_inputs_and_spreads_intermediate_rows_over_the_cubes():
    g, feeds = gemm_graph(m=64, k=128, n=384, gelu=True)
    st = compile_until(g, feeds, "memory", topology="base")
    plan, cubes = st.memory, st.topology.cubes
    cube_bytes = cubes[0].hbm_bytes
    x = plan.allocations["x"]
    assert len(x.addrs) == len(cubes) == 4
    assert [a // cube_bytes for a in x.addrs] == [0, 1, 2, 3]
    for key, nbytes in (("x", 64 * 128 * 4), ("y", 64 * 384 * 4), ("z", 64 * 384 * 4)):
        a = plan.allocations[key]
        assert a.nbytes == nbytes and all(addr % 256 == 0 for addr in a.addrs)
    # the intermediate y (64 rows, 24 KiB parts): 16 rows per cube, part c in cube c, in row order
    y = plan.allocations["y"]
    assert [(off, nb) for off, nb, _ in y.parts] == [(c * 16 * 384 * 4, 16 * 384 * 4)
                                                     for c in range(4)]
    assert [addr // cube_bytes for _, _, addr in y.parts] == [0, 1, 2, 3]
    # the graph output z stays whole in cube 0 (the host reads it at one address)
    z = plan.allocations["z"]
    assert not z.parts and len(z.addrs) == 1 and z.addrs[0] < cube_bytes
    spans = sorted(s for a in plan.allocations.values() for s in a.spans())
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False))


def test_a_dma_across_parts_is_split_at_the_boundaries():
    from kernbench.compiler.hbm import MemoryPlan

    plan = MemoryPlan(4, 1 << 20)
    c = 256  # 64 rows of 256 fp32: 16 KiB parts (the spread minimum)
    a = plan.allocate("t", (64, c), "fp32", "intermediate", spread=True)
    p = a.placement()
    # rows 14..17 (4 rows) cross the part boundary after row 15: two whole-row runs
    assert p.runs(14 * c, 4, c, c) == [(0, 2, 0, c), (2, 2, 0, c)]
    # a column block (3 of c elements, rows c apart) of rows 15..16: one run per row
    assert p.runs(15 * c + 2, 2, 3, c) == [(0, 1, 0, 3), (1, 1, 0, 3)]
    # seen as one flat row of 4c elements from row 14: split inside the row
    assert p.runs(14 * c, 1, 4 * c, 4 * c) == [(0, 1, 0, 2 * c), (0, 1, 2 * c, 2 * c)]
    # physical addresses: row 16 is the first row of part 1, in cube 1
    assert p.physical(p.addr + 16 * c * 4) == a.parts[1][2] and a.parts[1][2] >= 1 << 20


# ----------------------------------------------------------------------------- tiling


def test_tiling_gemm_tiles_are_array_aligned_fit_the_tcm_and_cover_every_mac():
    m, k, n = 256, 1024, 512
    g, feeds = gemm_graph(m=m, k=k, n=n)
    st = compile_until(g, feeds, "tiling")
    ops = st.tiles.ops
    te = [o for o in ops if o.opcode == "TE_GEMM_TILE"]
    for o in te:
        tm, tn, tk = o.fields["m"], o.fields["n"], o.fields["k"]
        assert tm % ARRAY == 0 and tn % ARRAY == 0 and tk % ARRAY == 0
        a, w, c = tm * tk, tk * tn, tm * tn * 4  # int8 A and W, int32 accumulator
        assert max(a, w, c) <= BANK and 2 * (a + w + c) <= ALLOCATABLE
        assert o.fields["accumulate"] == (o.reads[-1][0] == "ofm")
    assert sum(o.fields["m"] * o.fields["n"] * o.fields["k"] for o in te) == m * n * k
    # one epilogue and one store per output tile; the stores write y exactly once
    tiles = {(id(o.writes[0][1])) for o in te}
    deq = [o for o in ops if o.opcode == "VE_DEQUANTIZE_TILE"]
    stores = [o for o in ops if o.opcode == "DMA_STORE_TILE" and o.hbm_writes[0][0] == "y"]
    assert len(deq) == len(stores) == len(tiles)
    assert sum(o.fields["num_elements"] for o in stores) == m * n
    # the activation is quantized once, row blocks covering all M rows at x's static scale
    quant = [o for o in ops if o.opcode == "VE_QUANTIZE_TILE"]
    assert sum(o.fields["rows"] for o in quant) == m
    assert {o.fields["scale"] for o in quant} == {float(_absmax_scale(feeds["x"]))}


def test_tiling_gemm_weight_is_stored_int8_with_per_column_scales():
    g, feeds = gemm_graph(m=32, k=64, n=32)
    w = g.weights["w"].copy()
    st = compile_until(g, feeds, "tiling")
    alloc = st.memory.allocations["w@int8"]
    sw = np.max(np.abs(w), axis=0) / np.float32(127)
    assert np.array_equal(alloc.data, np.clip(np.round(w / sw), -127, 127).astype(np.int8))
    # the epilogue's scale and bias: the two rows of one constant (one DMA per tile)
    scale, bias = st.memory.allocations["fc:y@scale_bias"].data
    np.testing.assert_allclose(scale, _absmax_scale(feeds["x"]) * sw, rtol=1e-6)
    np.testing.assert_array_equal(bias, np.broadcast_to(g.weights["b"], bias.shape))


def test_tiling_gelu_runs_in_row_blocks_over_the_pes():
    g, feeds = gemm_graph(m=64, k=128, n=96, gelu=True, y_output=True)
    st = compile_until(g, feeds, "tiling")
    gelu = [o for o in st.tiles.ops if o.layer == "act" and o.opcode == "VE_GELU_TILE"]
    assert sum(o.fields["rows"] for o in gelu) == 64
    assert {o.fields["length"] for o in gelu} == {96}
    assert len({o.pe for o in gelu}) == len(SMALL.pes)


def test_tiling_attention_per_group_and_head():
    g, feeds = attention_graph(b=1, s=8, hq=2, hkv=1, d=16)
    st = compile_until(g, feeds, "tiling")
    ops = [o for o in st.tiles.ops if o.layer == "attn"]
    kv = ["DMA_LOAD_TILE", "VE_QUANTIZE_TILE"] * 2  # K and V once for the group
    head = ["DMA_LOAD_TILE", "VE_QUANTIZE_TILE", "TE_GEMM_TILE", "VE_DEQUANTIZE_TILE",
            "VE_SOFTMAX_TILE", "VE_ROWSCALE_TILE", "VE_QUANTIZE_TILE", "TE_GEMM_TILE",
            "VE_DEQUANTIZE_TILE", "DMA_STORE_TILE"]
    assert [o.opcode for o in ops] == kv + head * 2
    assert len({o.pe for o in ops}) == 1  # one (batch, group): one PE
    sq, sk = (st.graph.weights[f"{t}::act_scale"] for t in "qk")
    scores = [o for o in ops if o.opcode == "VE_DEQUANTIZE_TILE"][0::2]
    want = float(np.float32(sq) * np.float32(sk) * np.float32(1.0 / np.sqrt(16)))
    assert [o.fields["scale"] for o in scores] == [want, want]
    qk = [o for o in ops if o.fields.get("transpose_wgt")]
    assert [(o.fields["m"], o.fields["n"], o.fields["k"]) for o in qk] == [(8, 8, 16)] * 2
    assert [o.fields["causal_offset"] for o in ops if o.opcode == "VE_SOFTMAX_TILE"] == [0, 0]


# ----------------------------------------------------------------------------- placement


def test_placement_interleaves_pes_and_keeps_each_pe_in_order():
    g, feeds = gemm_graph(m=256, k=256, n=256)
    st = compile_until(g, feeds, "tiling")
    before = {pe: [o for o in st.tiles.ops if o.pe == pe] for pe in range(len(SMALL.pes))}
    st = Place().apply(st)
    ops = st.tiles.ops
    assert [o.index for o in ops] == list(range(len(ops)))
    assert all(a.stream <= b.stream for a, b in zip(ops, ops[1:], strict=False))
    for pe, seq in before.items():
        assert [o for o in ops if o.pe == pe] == seq
    first_phase = [o for o in ops if o.stream == ops[0].stream]
    assert [o.pe for o in first_phase[:4]] == [0, 1, 2, 3]


# ----------------------------------------------------------------------------- tcm_alloc


@pytest.mark.parametrize("graph", [
    lambda: gemm_graph(m=256, k=1024, n=512, gelu=True),
    lambda: attention_graph(b=1, s=128, hq=8, hkv=1, d=64),  # K/V live while heads stream
], ids=["gemm_gelu", "attention"])
def test_tcm_alloc_buffers_are_aligned_in_one_bank_and_never_overlap_while_live(graph):
    g, feeds = graph()
    st = compile_until(g, feeds, "tcm_alloc")
    tg = st.tiles
    span: dict[int, list[int]] = {}
    for i, op in enumerate(tg.ops):
        for _, b in op.reads + op.writes:
            span.setdefault(b.id, [i, i])[1] = i
    for b in tg.bufs:
        assert b.offset % 64 == 0 and b.offset + b.nbytes <= ALLOCATABLE
        assert b.offset // BANK == (b.offset + b.nbytes - 1) // BANK == b.bank
        assert b.bank_offset == b.offset - b.bank * BANK
    for pe in range(len(SMALL.pes)):
        bufs = [b for b in tg.bufs if b.pe == pe]
        for i, a in enumerate(bufs):
            for c in bufs[i + 1:]:
                live_together = span[a.id][0] <= span[c.id][1] and span[c.id][0] <= span[a.id][1]
                apart = a.offset + a.nbytes <= c.offset or c.offset + c.nbytes <= a.offset
                assert apart or not live_together, (a.label, c.label)


def test_tcm_alloc_overflow_names_the_pe():
    g, _ = gemm_graph()
    tg = TileGraph()
    n = ALLOCATABLE // BANK + 1  # one more bank-sized live buffer than fits
    for i in range(n):
        b = Buf(i, 0, BANK, f"big{i}")
        tg.bufs.append(b)
        tg.ops.append(TileOp("DMA_LOAD_TILE", 0, "fc", {}, writes=[("spm", b)], index=i))
    st = CompileState(g, SMALL, tiles=tg)
    with pytest.raises(CapacityError, match=f"TCM overflow on PE 0: big{n - 1} needs"):
        AllocateTcm().apply(st)


# ----------------------------------------------------------------------------- schedule


def _bytes(op: TileOp) -> set[int]:
    """HBM bytes a DMA touches, from its CMDQ fields."""
    f = op.fields
    row_bytes = f["num_elements"] * 4 // f.get("rows", 1)
    return {f["dram_addr"] + r * f.get("stride_bytes", row_bytes) + c
            for r in range(f.get("rows", 1)) for c in range(row_bytes)}


def test_schedule_consumers_wait_for_their_producers_and_only_for_them():
    g, feeds = gemm_graph(m=64, k=256, n=512, gelu=True, y_output=True)
    st = compile_until(g, feeds, "schedule")
    ops = st.tiles.ops
    writer: dict[int, int] = {}
    for op in ops:  # every TCM read waits for the last writer of its buffer
        assert all(writer[b.id] in op.deps for _, b in op.reads if writer.get(b.id) != op.index)
        writer.update({b.id: op.index for _, b in op.writes})
    stores = [o for o in ops if o.opcode == "DMA_STORE_TILE" and o.layer == "fc"]
    loads = [o for o in ops if o.opcode == "DMA_LOAD_TILE" and o.layer == "act"
             and o.hbm_reads[0][0] == "y"]
    assert loads and len(stores) > 1
    for ld in loads:  # a GELU load waits exactly for the GEMM stores of the bytes it reads
        want = {s.index for s in stores if _bytes(s) & _bytes(ld)}
        assert want and want == set(ld.deps) & {s.index for s in stores}


# ----------------------------------------------------------------------------- emit


def test_emit_one_entry_per_op_then_end_and_a_valid_program():
    g, feeds = gemm_graph(m=256, k=1024, n=512, gelu=True)
    st = compile_until(g, feeds, "emit")
    ops, doc = st.tiles.ops, st.cmdq
    assert any(b.bank > 0 for b in st.tiles.bufs)  # offsets are relative to their bank
    entries = doc.entries
    assert len(entries) == len(ops) + 1
    assert [e["opcode"] for e in entries] == [o.opcode for o in ops] + ["END"]
    waited = {d for o in ops for d in o.deps}
    assert entries[-1]["deps_before"] == [o.index for o in ops if o.index not in waited]
    for e, op in zip(entries, ops, strict=False):
        assert (e["id"], e["pe"], e["layer_id"], e["deps_before"]) == \
            (op.index, op.pe, op.layer, op.deps)
        for role, b in op.reads + op.writes:
            # an operand packed behind another in one buffer starts `role_offset` in
            packed = (op.role_offset or {}).get(role, 0)
            assert (e[f"{role}_bank"], e[f"{role}_offset"]) == (b.bank, b.bank_offset + packed)
    assert any(op.role_offset for op in ops)  # the epilogue's bias behind its scale
    assert doc.to_json()["metadata"] == {"version": CMDQ_VERSION, "graph_name": "tiny",
                                         "generated_by": "kernbench.compiler",
                                         "topology": "small"}
    assert validate_document(doc.to_json(), limits_for(SMALL)) == []
    n_gemm = sum(o.layer == "fc" for o in ops)
    assert st.tiles.layer_tiles == {"fc": n_gemm, "act": len(ops) - n_gemm}


def test_tcm_alloc_dead_space_is_taken_part_by_part():
    """A dead buffer's bytes leave the dead space as new buffers take them (ADR-0713): a
    buffer over the rest waits for the dead buffer's users; once every byte is taken the
    dead buffer is retired, and a buffer over those bytes waits for the new owners."""
    ring = _Ring(0, capacity=1024, bank=1024)
    x, y, z, v = (Buf(i, 0, n, name) for i, (n, name) in
                  enumerate([(1024, "x"), (512, "y"), (512, "z"), (1024, "v")]))
    ring.alloc(x)
    ring.free(x)
    ring.alloc(y)
    assert (y.offset, y.war_after, ring.retired) == (0, [x], [])
    ring.alloc(z)
    assert (z.offset, z.war_after, ring.retired) == (512, [x], [x])
    ring.free(y)
    ring.free(z)
    ring.alloc(v)
    assert v.war_after == [y, z]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["fp32", "fp16", "int8"]), st.integers(1, 3), st.integers(0, 600),
       st.integers(0, 9), st.integers(1, 70), st.integers(0, 80))
def test_dma_runs_are_the_parts_each_row_touches(dtype, boundary, back, rows, row_elems,
                                                 gap):
    """`Placement.runs` against a byte-by-byte reference: each row cut where its bytes
    change part, consecutive whole rows in one part merged into one run. Accesses start
    up to `back` elements before a part boundary."""
    from kernbench.compiler.hbm import ITEMSIZE, MemoryPlan

    plan = MemoryPlan(4, 1 << 20)
    isz = ITEMSIZE[dtype]
    a = plan.allocate("t", (int(64 * 4 / isz), 256), dtype, "intermediate", spread=True)
    p = a.placement()
    assert len(p.parts) == 4  # 64 KiB in four 16 KiB parts
    stride = row_elems + gap
    off = max(0, int((p.parts[boundary][0] - p.addr) / isz) - back)
    if rows and (off + (rows - 1) * stride + row_elems) * isz > p.parts[-1][1] - p.addr:
        return  # past the storage's end

    def part(b: int) -> int:
        return next(i for i, (lo, hi, _) in enumerate(p.parts) if lo <= b < hi)

    want: list[tuple[int, int, int, int]] = []
    for r in range(rows):
        lo = p.addr + int((off + r * stride) * isz)
        hi = p.addr + math.ceil((off + r * stride + row_elems) * isz)
        if part(lo) == part(hi - 1):
            if want and want[-1][2:] == (0, row_elems) and want[-1][0] + want[-1][1] == r \
                    and part(p.addr + int((off + (r - 1) * stride) * isz)) == part(lo):
                want[-1] = (want[-1][0], want[-1][1] + 1, 0, row_elems)
            else:
                want.append((r, 1, 0, row_elems))
            continue
        e = 0
        while e < row_elems:
            j = part(p.addr + int((off + r * stride + e) * isz))
            n = next(k for k in range(1, row_elems - e + 1)
                     if k == row_elems - e
                     or part(p.addr + int((off + r * stride + e + k) * isz)) != j)
            want.append((r, 1, e, n))
            e += n
    assert p.runs(off, rows, row_elems, stride) == want
