"""tt-metal's multicast matmul as a CMDQ program for kernbench's discrete-event simulator.

The program config is the analytic model's (`ttmetal_matmul.program`, ADR-0861); this
module emits it at K-block granularity (ADR-0863) and `silicon.py --engine des` runs it:

* Cores: `Program.cores_y` rows × `cores_x` columns of the card's compute grid (core
  (r, c) is the PE at router r{r}c{c}); the 1-D configs lay their cores out row-major
  over the row's grid.
* Per output block and K block, double-buffered (two TCM slots per operand): the in0
  sender of each core row (column 0; for an L1-sharded in0 the core holding that K
  shard, with no DRAM read) reads its h × kw tile block from DRAM (DMA_LOAD_TILE, rows
  of the row-major operand, which the HBM address map interleaves over the banks) and
  multicasts it to the rest of its row (DMA_MCAST_TILE); the in1 sender of each column
  (row 0) does the same down its column. 1-D in0: one in0 sender for all cores, every
  core reads its own in1 block; 1-D in1 the other way round. A sender refills a slot
  only after every receiver's GEMM of the block two steps before (the semaphore
  handshake of tt-metal's kernels, as dependencies).
* Every core runs one TE_GEMM_TILE per K block (accumulating after the first) on the
  tile engine, then stores its output block (DMA_STORE_TILE) when the output is in DRAM.
  The output block has two TCM slots, used by alternate output blocks: the writer
  drains one while the engine accumulates the next (tt-metal's writer kernel empties its
  output circular buffer while compute packs the next block's partials into its own);
  an output block's first GEMM waits only for the store of the block two before.

Operands live row-major in HBM at their tile format's bytes per element (block floats:
the shared exponents spread over the row, so a block's bytes are its tiles' bytes).
Shapes are padded to whole tiles and whole per-core blocks. The partials are the tile
engine's fp32 accumulator in TCM (tt-metal keeps bf16 partials: twice its bytes here;
`des_overrides` with the program adds the difference and the second output slot to the
TCM, which enters no timing).
Timing only, except `verify=True` (BF16 rows, DRAM operands): the output is stored as
fp32, so the data pass can be checked against numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ttmetal_matmul import TILE_BYTES, Program

from kernbench.topology.model import Topology

T = 32
QBITS = {"BFLOAT16": 16, "BFLOAT8_B": 8, "BFLOAT4_B": 4}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Cmdq:
    """Entries being emitted: each gets the next id and its deps (earlier ids)."""

    entries: list[dict] = field(default_factory=list)

    def add(self, entry: dict, deps: list[int | None]) -> int:
        i = len(self.entries)
        entry["id"] = i
        d = sorted({x for x in deps if x is not None})
        if d:
            entry["deps_before"] = d
        self.entries.append(entry)
        return i


@dataclass(frozen=True)
class Layout:
    """Bytes of the row's operands: per element in HBM (`elem` in bytes, a fraction for
    block floats), the GEMM's operand bits, the output's bytes per element."""

    row_bytes_per_tile: int   # bytes of one tile row of 32 elements
    qbits: int                # GEMM operand bits
    out_row_bytes_per_tile: int
    ofm_qbits: int

    @classmethod
    def of(cls, dtype: str, verify: bool) -> Layout:
        t = TILE_BYTES[dtype] // T
        if verify:
            if dtype != "BFLOAT16":
                raise ValueError("verify runs BFLOAT16 rows only (fp32 partials)")
            return cls(t, 16, 4 * T, 32)
        return cls(t, QBITS[dtype], t, 32)


def core_pes(prog: Program, grid_x: int, topo: Topology) -> list[list[int]]:
    """PE index of core (r, c) of the program's grid (1-D configs: row-major over grid_x)."""
    by_router = {p.router.rsplit(".", 1)[1]: p.index for p in topo.pes}
    if prog.kind == "mcast2d":
        return [[by_router[f"r{r}c{c}"] for c in range(prog.cores_x)]
                for r in range(prog.cores_y)]
    return [[by_router[f"r{i // grid_x}c{i % grid_x}"] for i in range(prog.cores_x)]]


def blocks(row: dict, prog: Program) -> tuple[int, int]:
    """(output blocks per core, K blocks per output block) of `row`'s program."""
    kt = _cdiv(int(row["k"]), T)
    obs = (prog.per_core_m // prog.out_block_h) * (prog.per_core_n // prog.out_block_w)
    return obs, _cdiv(kt, prog.in0_block_w)


def emit(row: dict, prog: Program, topo: Topology, verify: bool = False,
         limit: tuple[int, int] | None = None) -> list[dict]:
    """The CMDQ entries of `row`'s matmul under `prog` (module docstring), END last (its
    ``debug`` holds the HBM addresses and padded extents of in0 [m, k], in1 [k, n] and
    out [m, n], all row-major).
    Its TCM buffers use bank 0 of `topo`, which must be one bank of the usable TCM.
    `limit` (output blocks, K blocks) emits only the first output blocks of every core,
    each with only its first K blocks: a prefix of the program's steps, for
    `device_ns`'s extrapolation."""
    tcm = topo.config.cube.pe_template.pe_tcm
    tcm_bytes = (tcm.capacity_kib - tcm.reserved_kib) * 1024 // tcm.banks
    lay = Layout.of(row["dtype"], verify)
    gx = int(row["grid_size"].split("x")[0])
    pes = core_pes(prog, gx, topo)
    ny, nx = len(pes), len(pes[0])
    h, w, kw = prog.out_block_h, prog.out_block_w, prog.in0_block_w
    kt = _cdiv(int(row["k"]), T)
    nkb = _cdiv(kt, kw)
    obs = [(i, j) for i in range(prog.per_core_m // h) for j in range(prog.per_core_n // w)]
    one_d_in0, one_d_in1 = prog.kind == "mcast1d_in0", prog.kind == "mcast1d_in1"
    # padded extents in tiles: every core's whole block lies inside the tensors
    mt = prog.per_core_m * (1 if one_d_in0 else (nx if one_d_in1 else ny))
    nt = prog.per_core_n * (1 if one_d_in1 else nx)
    ktp = nkb * kw
    rb = lay.row_bytes_per_tile
    in0_base = 0
    in1_base = _align(in0_base + mt * T * ktp * rb)
    out_base = _align(in1_base + ktp * T * nt * rb)
    in0_bytes, in1_bytes = h * T * kw * rb, kw * T * w * rb
    ofm_bytes = h * T * w * T * lay.ofm_qbits // 8
    # TCM: two in0 slots, two in1 slots, two output block slots (one bank: see silicon.py)
    slot0 = [0, in0_bytes]
    slot1 = [2 * in0_bytes, 2 * in0_bytes + in1_bytes]
    base_o = 2 * in0_bytes + 2 * in1_bytes
    ofm_slots = [base_o, base_o + ofm_bytes]
    if base_o + 2 * ofm_bytes > tcm_bytes:
        raise ValueError(f"{prog.label()}: buffers of {base_o + 2 * ofm_bytes} bytes exceed "
                         f"the {tcm_bytes}-byte TCM")
    sharded = row["in0_storage_type"] == "L1" and prog.kind == "mcast2d"
    out_dram = row["out_storage_type"] == "DRAM" or verify
    q = Cmdq()
    gemm: dict[tuple[int, int, int], int] = {}  # (r, c, step) -> entry
    store: dict[tuple[int, int, int], int] = {}  # (r, c, output block) -> its store
    arrive0: dict[tuple[int, int, int], int] = {}
    arrive1: dict[tuple[int, int, int], int] = {}
    mc0: dict[tuple[int, int], int] = {}  # (group, step) -> the multicast that read a slot
    mc1: dict[tuple[int, int], int] = {}
    step = 0

    def core_tiles(r: int, c: int, bh: int, bw: int) -> tuple[int, int]:
        """(first output tile row, first output tile column) of a core's block."""
        if one_d_in0:
            return bh * h, c * prog.per_core_n + bw * w
        if one_d_in1:
            return c * prog.per_core_m + bh * h, bw * w
        return r * prog.per_core_m + bh * h, c * prog.per_core_n + bw * w

    if limit is not None:
        obs, nkb = obs[:limit[0]], min(nkb, limit[1])
    for oi, (bh, bw) in enumerate(obs):
        ofm_off = ofm_slots[oi % 2]
        for kb in range(nkb):
            s = step % 2
            # ---- in0: per group a sender, a load (unless sharded), a multicast
            groups0 = ([[(0, c) for c in range(nx)]] if one_d_in0 else
                       [[(0, c)] for c in range(nx)] if one_d_in1 else
                       [[(r, c) for c in range(nx)] for r in range(ny)])
            for gi, grp in enumerate(groups0):
                snd = grp[kb % len(grp)] if sharded else grp[0]
                rows0, _ = core_tiles(*snd, bh, bw)
                prev = [gemm.get((*rc, step - 2)) for rc in grp]
                src = None
                if not sharded:
                    src = q.add(_load(lay, in0_base + (rows0 * T * ktp + kb * kw) * rb,
                                      h * T, kw * rb, ktp * rb, slot0[s],
                                      pes[snd[0]][snd[1]], "activation"),
                                prev + [mc0.get((gi, step - 2))])
                dsts = [rc for rc in grp if rc != snd]
                if dsts:
                    m = q.add(_mcast(in0_bytes, slot0[s], [pes[r][c] for r, c in dsts],
                                     pes[snd[0]][snd[1]]), prev + [src])
                    mc0[(gi, step)] = m
                    for rc in dsts:
                        arrive0[(*rc, step)] = m
                arrive0[(*snd, step)] = src
            # ---- in1
            groups1 = ([[(0, c)] for c in range(nx)] if one_d_in0 else
                       [[(0, c) for c in range(nx)]] if one_d_in1 else
                       [[(r, c) for r in range(ny)] for c in range(nx)])
            for gi, grp in enumerate(groups1):
                snd = grp[0]
                _, cols0 = core_tiles(*snd, bh, bw)
                prev = [gemm.get((*rc, step - 2)) for rc in grp]
                src = q.add(_load(lay, in1_base + (kb * kw * T * nt + cols0) * rb,
                                  kw * T, w * rb, nt * rb, slot1[s],
                                  pes[snd[0]][snd[1]], "weight"),
                            prev + [mc1.get((gi, step - 2))])
                dsts = [rc for rc in grp if rc != snd]
                if dsts:
                    m = q.add(_mcast(in1_bytes, slot1[s], [pes[r][c] for r, c in dsts],
                                     pes[snd[0]][snd[1]]), prev + [src])
                    mc1[(gi, step)] = m
                    for rc in dsts:
                        arrive1[(*rc, step)] = m
                arrive1[(*snd, step)] = src
            # ---- the GEMM of every core
            for r in range(ny):
                for c in range(nx):
                    first = kb == 0
                    gemm[(r, c, step)] = q.add(
                        _gemm(lay, h * T, kw * T, w * T, slot0[s], slot1[s], ofm_off,
                              not first, pes[r][c]),
                        [arrive0.get((r, c, step)), arrive1.get((r, c, step)),
                         gemm.get((r, c, step - 1)),
                         store.get((r, c, oi - 2)) if first else None])
            step += 1
        if out_dram:
            for r in range(ny):
                for c in range(nx):
                    r0, c0 = core_tiles(r, c, bh, bw)
                    ob = lay.out_row_bytes_per_tile
                    store[(r, c, oi)] = q.add(
                        _store(out_base + (r0 * T * nt + c0) * ob, h * T, w * ob, nt * ob,
                               ofm_off, pes[r][c]),
                        [gemm[(r, c, step - 1)]])
    # the operands' HBM placement, for a caller that fills and reads them (verify)
    q.add({"opcode": "END", "debug": {"in0": in0_base, "in1": in1_base, "out": out_base,
                                      "m": mt * T, "k": ktp * T, "n": nt * T}}, [])
    return q.entries


def _align(addr: int, to: int = 1 << 16) -> int:
    return _cdiv(addr, to) * to


def _load(lay: Layout, addr: int, rows: int, row_bytes: int, stride: int, off: int, pe: int,
          role: str) -> dict:
    return {"opcode": "DMA_LOAD_TILE", "pe": pe, "tensor_role": role, "qbits": 8,
            "dram_addr": addr, "spm_bank": 0, "spm_offset": off,
            "num_elements": rows * row_bytes, "rows": rows,
            "stride_bytes": stride}


def _store(addr: int, rows: int, row_bytes: int, stride: int, off: int, pe: int) -> dict:
    return {"opcode": "DMA_STORE_TILE", "pe": pe, "qbits": 8, "dram_addr": addr,
            "spm_bank": 0, "spm_offset": off, "num_elements": rows * row_bytes, "rows": rows,
            "stride_bytes": stride}


def _mcast(nbytes: int, off: int, dsts: list[int], pe: int) -> dict:
    return {"opcode": "DMA_MCAST_TILE", "pe": pe, "qbits": 8, "num_elements": nbytes,
            "spm_bank": 0, "spm_offset": off, "dst_pes": dsts, "dst_bank": 0,
            "dst_offset": off}


def _gemm(lay: Layout, m: int, k: int, n: int, a: int, b: int, o: int, acc: bool,
          pe: int) -> dict:
    e = {"opcode": "TE_GEMM_TILE", "pe": pe, "m": m, "k": k, "n": n, "ifm_bank": 0,
         "ifm_offset": a, "wgt_bank": 0, "wgt_offset": b, "ofm_bank": 0, "ofm_offset": o,
         "qbits_weight": lay.qbits, "qbits_activation": lay.qbits,
         "ofm_qbits": lay.ofm_qbits, "accumulate": acc}
    if lay.qbits == 16:
        e["f16_format"] = "bf16"
    return e


def partials_excess_kib(prog: Program | None) -> int:
    """KiB the DES's two fp32 output slots take beyond tt-metal's bf16 partials of one
    output block (0 without a program)."""
    if prog is None:
        return 0
    return _cdiv(prog.out_block_h * prog.out_block_w * T * T * (2 * 4 - 2), 1024)


def des_overrides(row: dict, topo: Topology, params: dict[str, float],
                  prog: Program | None = None) -> list[str]:
    """Topology overrides of a DES run of `row`: the row's math fidelity, the fitted
    unpacker rate (counted in NoC words, as the analytic model counts it) and per-tile
    issue cost on the tile engine, and the usable TCM as one bank (buffers are not split
    at bank edges; the bank count does not change timing). With `prog`, the TCM also
    holds what the engine's fp32 partials take beyond tt-metal's bf16 ones
    (`partials_excess_kib`), so a program that fits tt-metal's L1 fits here; capacity
    enters no timing."""
    c = topo.config.cube
    word = c.router.link_bw_gbs / c.pe_template.pe_gemm.clock_ghz
    tcm = c.pe_template.pe_tcm
    cap = tcm.capacity_kib - tcm.reserved_kib + partials_excess_kib(prog)
    return [f"cube.pe_template.pe_gemm.math_fidelity={row['math_fidelity']}",
            f"cube.pe_template.pe_gemm.unpack_bytes_per_cycle={params['unpack_words'] * word}",
            f"cube.pe_template.pe_gemm.tile_issue_cycles={params['tile_overhead_cycles']}",
            f"cube.pe_template.pe_tcm.capacity_kib={cap}",
            "cube.pe_template.pe_tcm.reserved_kib=0",
            "cube.pe_template.pe_tcm.banks=1"]


#: programs with more core-steps (cores × output blocks × K blocks) are extrapolated
MAX_CORE_STEPS = 20000
#: K blocks of the extrapolation's short runs (even: whole double-buffer periods)
K1, K2 = 4, 8


def _run(row: dict, prog: Program, topo: Topology,
         limit: tuple[int, int] | None) -> tuple[float, int]:
    from kernbench.cmdq.io import parse_program
    from kernbench.host.simulate import simulate_program
    entries = emit(row, prog, topo, limit=limit)
    run = simulate_program(parse_program({"cmdq": entries}), topo, trace=False,
                           per_entry=False, consume=True)
    return float(run.stats()["total_ns"]), len(entries)


def extrapolate(t11: float, t12: float, t22: float, k1: int, k2: int, obs: int,
                nkb: int) -> float:
    """The device time of `obs` output blocks of `nkb` K blocks each from three runs of
    the program's prefix, under T(o, k) = a + o · (c + k · b): t11 = T(1, k1),
    t12 = T(1, k2), t22 = T(2, k2) (b: a steady K block; c: an output block's own cost,
    its store and refill; a: the start-up and drain)."""
    b = (t12 - t11) / (k2 - k1)
    per_block = t22 - t12
    a = t12 - per_block
    return a + obs * (per_block + (nkb - k2) * b)


def device_ns(row: dict, prog: Program, topo: Topology,
              exact: bool = False) -> tuple[float, int, str]:
    """(simulated device time in ns, CMDQ entries simulated, how) of `row` under `prog`
    on `topo` (a topology built with `des_overrides`), timing only. A program of at most
    MAX_CORE_STEPS core-steps (or `exact`) is run whole ("exact"); a longer one is extrapolated
    from three runs of its prefix (`extrapolate`: 1 output block of K1 and K2 K blocks,
    2 of K2; "extrapolated"); with one output block or few K blocks, the prefix runs
    use what the program has."""
    obs, nkb = blocks(row, prog)
    if exact or obs * nkb * prog.cores_x * prog.cores_y <= MAX_CORE_STEPS:
        t, n = _run(row, prog, topo, None)
        return t, n, "exact"
    k1, k2 = (K1, K2) if nkb > K2 else (max(1, nkb // 2), nkb)
    if k1 == k2:  # one K block per output block: extrapolate over output blocks only
        t1, n1 = _run(row, prog, topo, (1, nkb))
        t2, n2 = _run(row, prog, topo, (2, nkb))
        return t1 + (obs - 1) * (t2 - t1), n1 + n2, "extrapolated"
    t11, n11 = _run(row, prog, topo, (1, k1))
    t12, n12 = _run(row, prog, topo, (1, k2))
    if obs == 1:
        return t12 + (nkb - k2) * (t12 - t11) / (k2 - k1), n11 + n12, "extrapolated"
    t22, n22 = _run(row, prog, topo, (2, k2))
    return extrapolate(t11, t12, t22, k1, k2, obs, nkb), n11 + n12 + n22, "extrapolated"
