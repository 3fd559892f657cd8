"""tt-metal's 2-D multicast matmul on a kernbench preset: an analytic block-pipeline model.

What it models (ADR-0861; docs/fidelity.md says what it leaves out):

* The program config tt-metal picks. Hand-tuned rows: per-core output block
  ceil(Mt / grid_y) × ceil(Nt / grid_x) tiles and the largest in0_block_w (a divisor of
  Kt / grid_x) whose circular buffers fit in L1, as tt-metal's benchmark test builds its
  MatmulMultiCoreReuseMultiCastProgramConfig. Out-of-box rows: ttnn's automatic config for
  DRAM-interleaved operands (`create_simple_matmul_program_config`): a per-core factor of
  16/8/4/2 that fits L1 decides the block counts; one block row gives the 1-D in0
  multicast config (all of M on each core, N split over every core, in0_block_w 2), one
  block column the 1-D in1 config, otherwise the 2-D config with in0_block_w = Kt /
  grid_x and the output block shrunk until the buffers fit.
* The kernel as a double-buffered pipeline over K blocks. Per block a core computes
  out_block_h × out_block_w × in0_block_w tile products (the preset's matrix-engine model,
  `gemm_cycles` of a 32 × 32 × 32 tile at the row's math fidelity) plus a per-output-tile
  pack/accumulate cost; the in0 sender of each row and the in1 sender of each column read
  their block from DRAM (or L1 when sharded) at the per-core NoC rate and multicast it;
  all senders together share the DRAM banks' bandwidth. A block costs the longest of
  compute, the sender's transfer plus a per-block handshake latency, and the DRAM share;
  the first block's transfer and the output write are not hidden.
* The op as the benchmark times it: with trace, launch overhead + device time; without,
  the host's per-op enqueue time when that is longer (host and device run asynchronously).

Free parameters (fitted on n150 rows only, `silicon.py --fit`): PARAM_NAMES.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernbench.components.builtin.pe_gemm import gemm_cycles
from kernbench.numerics.block_float import BFP4_B, BFP8_B
from kernbench.topology.model import Topology

T = 32  # tile edge
TILE_BYTES = {"BFLOAT16": 2 * T * T, "BFLOAT8_B": BFP8_B.tile_bytes(), "BFLOAT4_B": BFP4_B.tile_bytes()}
INTERM_BYTES = 2 * T * T  # partials are bf16 (fp32_dest_acc_en is off in every published row)

#: measured DRAM read bandwidth over the spec figure (docs/topologies.md): tt-metal
#: Saturating_DRAM_bandwidth (Wormhole 267 of 288 GB/s) and its Blackhole companion
#: (500 of 512 GB/s). Published measurements, not fitted.
DRAM_EFFICIENCY = {"n150": 267.0 / 288.0, "p150": 500.0 / 512.0}

PARAM_NAMES = ("launch_ns", "host_oob_ns", "host_tuned_ns", "noc_eff", "tile_overhead_cycles",
               "unpack_words")
#: starting point of the fit; silicon.py --fit replaces them with fitted values
DEFAULT_PARAMS = {"launch_ns": 5000.0, "host_oob_ns": 40000.0, "host_tuned_ns": 90000.0,
                  "noc_eff": 0.5, "tile_overhead_cycles": 4.0, "unpack_words": 1.5}


@dataclass(frozen=True)
class Chip:
    """The facts of a preset the model reads."""

    name: str
    clock_ghz: float
    tile_cycles: dict[str, int]  # math fidelity -> cycles of a 32^3 tile product
    noc_gbs: float               # one NoC link (bytes per ns)
    dram_gbs: float              # all banks, spec
    l1_bytes: int                # usable L1 per core (capacity - reserved)

    @classmethod
    def from_topology(cls, topo: Topology) -> Chip:
        c = topo.config.cube
        g = c.pe_template.pe_gemm
        cyc = {f: gemm_cycles(g.model_copy(update={"math_fidelity": f}), T, T, T, 16)
               for f in ("LoFi", "HiFi2", "HiFi3", "HiFi4")}
        return cls(topo.config.name, g.clock_ghz, cyc, c.router.link_bw_gbs,
                   c.hbm_ctrl.channels * c.hbm_ctrl.channel_bw_gbs,
                   (c.pe_template.pe_tcm.capacity_kib - c.pe_template.pe_tcm.reserved_kib) * 1024)


@dataclass(frozen=True)
class Program:
    """A tt-metal matmul program config, in tiles."""

    kind: str        # mcast2d | mcast1d_in0 | mcast1d_in1
    cores_y: int     # cores along the grid's rows (in0 multicast runs along each row)
    cores_x: int     # cores along its columns (in1 multicast runs down each column)
    per_core_m: int
    per_core_n: int
    in0_block_w: int
    out_block_h: int
    out_block_w: int
    subblock_h: int = 1
    subblock_w: int = 1

    @property
    def cores(self) -> int:
        return self.cores_y * self.cores_x

    def label(self) -> str:
        return (f"{self.kind} cores={self.cores_y}x{self.cores_x} pc={self.per_core_m}x{self.per_core_n} "
                f"blk={self.out_block_h}x{self.out_block_w} kw={self.in0_block_w} "
                f"sb={self.subblock_h}x{self.subblock_w}")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _cb_bytes(pm: int, pn: int, kw: int, t_in: int, t_out: int, in0_shard: int = 0) -> int:
    """L1 the buffers of one core take: double-buffered in0 / in1 blocks (or the in0 shard),
    the output block, and a bf16 partials block when the output format differs."""
    in0 = in0_shard if in0_shard else 2 * pm * kw * t_in
    interm = 0 if t_out == INTERM_BYTES else pm * pn * INTERM_BYTES
    return in0 + 2 * pn * kw * t_in + pm * pn * t_out + interm


def _divisors_desc(n: int) -> list[int]:
    return [d for d in range(n, 0, -1) if n % d == 0]


def _fit_block(pm: int, pn: int, kw: int, t: int, l1: int, adjust_k: bool,
               in0_shard: int = 0) -> tuple[int, int, int]:
    """(out_block_h, out_block_w, in0_block_w): the whole per-core block if its buffers fit,
    else the largest, most square divisor block that does (k kept unless adjust_k)."""
    if _cb_bytes(pm, pn, kw, t, t, in0_shard) < l1:
        return pm, pn, kw
    best: dict[int, tuple[int, int]] = {}
    for h in _divisors_desc(pm):
        for w in _divisors_desc(pn):
            r = max(h, w) / min(h, w)
            old = best.get(h * w)
            if old is None or max(old) / min(old) > r:
                best[h * w] = (h, w)
    for k in [d for d in _divisors_desc(kw) if adjust_k or d == kw]:
        for prod in sorted(best, reverse=True):
            h, w = best[prod]
            if _cb_bytes(h, w, k, t, t, in0_shard) < l1:
                return h, w, k
    return 1, 1, 1


#: (h, w) subblocks ttnn tries, largest first (its SUBBLOCK_HW_CHOICES order)
_SUBBLOCKS = ((4, 2), (2, 4), (8, 1), (1, 8), (7, 1), (1, 7), (3, 2), (2, 3), (6, 1), (1, 6),
              (5, 1), (1, 5), (2, 2), (4, 1), (1, 4), (3, 1), (1, 3), (2, 1), (1, 2), (1, 1))


def auto_subblock(h: int, w: int) -> tuple[int, int]:
    """ttnn's automatic subblock: the first (sh, sw) of its list dividing (h, w)."""
    return next((a, b) for a, b in _SUBBLOCKS if h % a == 0 and w % b == 0)


def test_subblock(h: int, w: int) -> tuple[int, int]:
    """The benchmark test's subblock: the largest sh·sw ≤ 8 dividing (h, w), first found
    in row-major order of (sh, sw); sh = 1 when sw does not cover the block width."""
    best, bh, bw = 0, 1, 1
    for a in range(1, h + 1):
        for b in range(1, w + 1):
            if h % a == 0 and w % b == 0 and a * b <= 8 and a * b > best:
                best, bh, bw = a * b, a, b
    return (1 if w > bw else bh), bw


def program(row: dict, chip: Chip) -> Program:
    """The program config tt-metal runs for `row`, with its subblock (module docstring)."""
    p = _program(row, chip)
    sb = (test_subblock if row["config"] == "hand_tuned" else auto_subblock)(
        p.out_block_h, p.out_block_w)
    return Program(p.kind, p.cores_y, p.cores_x, p.per_core_m, p.per_core_n, p.in0_block_w,
                   p.out_block_h, p.out_block_w, *sb)


def _program(row: dict, chip: Chip) -> Program:
    """The program config tt-metal runs for `row` (module docstring)."""
    gx, gy = (int(v) for v in row["grid_size"].split("x"))
    mt, kt, nt = (_cdiv(int(row[d]), T) for d in ("m", "k", "n"))
    t = TILE_BYTES[row["dtype"]]
    if row["config"] == "hand_tuned":
        pm, pn = _cdiv(mt, gy), _cdiv(nt, gx)
        kx = max(1, kt // gx)
        shard = pm * kx * t if row["in0_storage_type"] == "L1" else 0
        for kw in _divisors_desc(kx):
            if _cb_bytes(pm, pn, kw, t, t, shard) < chip.l1_bytes:
                return Program("mcast2d", _cdiv(mt, pm), _cdiv(nt, pn), pm, pn, kw, pm, pn)
        h, w, kw = _fit_block(pm, pn, 1, t, chip.l1_bytes, True, shard)
        return Program("mcast2d", _cdiv(mt, pm), _cdiv(nt, pn), pm, pn, kw, h, w)
    pcf = next((f for f in (16, 8, 4, 2) if _cb_bytes(f, f, 2, t, t) < chip.l1_bytes), 1)
    nby, nbx = _cdiv(mt, pcf), _cdiv(nt, pcf)
    fits = not (nby == 1 and nbx == 1) and nby <= gy and nbx <= gx
    ry, rx = (nby, nbx) if fits else (0, 0)
    if ry == 1 or rx == 1:
        kw = 2 if kt % 2 == 0 else 1
        if ry == 1:  # one block row: M whole on every core, N over all cores
            pm, pn = mt, _cdiv(_cdiv(int(row["n"]), gx * gy), T)
            kind, cores = "mcast1d_in0", _cdiv(nt, pn)
        else:
            pm, pn = _cdiv(_cdiv(int(row["m"]), gx * gy), T), nt
            kind, cores = "mcast1d_in1", _cdiv(mt, pm)
        h, w, kw = _fit_block(pm, pn, kw, t, chip.l1_bytes, False)
        return Program(kind, 1, cores, pm, pn, kw, h, w)
    kw = kt // gx if kt % gx == 0 else 1
    pm, pn = _cdiv(mt, gy), _cdiv(nt, gx)
    h, w, kw = _fit_block(pm, pn, kw, t, chip.l1_bytes, True)
    return Program("mcast2d", _cdiv(mt, pm), _cdiv(nt, pn), pm, pn, kw, h, w)


def device_ns(row: dict, chip: Chip, prog: Program, p: dict[str, float], dram_eff: float) -> float:
    """Device time of the op (ns): the K-block pipeline of every output block, the first
    transfer exposed, then the output write."""
    t = TILE_BYTES[row["dtype"]]
    kt = _cdiv(int(row["k"]), T)
    h, w, kw = prog.out_block_h, prog.out_block_w, prog.in0_block_w
    cyc = chip.tile_cycles[row["math_fidelity"]]
    # per tile product the unpacker moves the operand tiles from L1 to the engine's source
    # registers while the engine multiplies (the longer of the two), plus a fixed issue cost;
    # its rate is counted in L1 / NoC words per cycle (32 B on Wormhole, 64 B on Blackhole)
    word = chip.noc_gbs / chip.clock_ghz  # bytes per cycle of the L1 / NoC word
    per_product = max(cyc, t / (p["unpack_words"] * word)) + p["tile_overhead_cycles"]
    compute = h * w * kw * per_product / chip.clock_ghz
    core_bw = chip.noc_gbs * p["noc_eff"]
    dram_bw = chip.dram_gbs * dram_eff
    in0_b, in1_b = h * kw * t, w * kw * t
    in0_dram = row["in0_storage_type"] == "DRAM"
    # bytes all senders pull from DRAM per K block: one in0 sender per core row (all of M
    # for a 1-D in0 multicast), one in1 reader per core column (every core for 1-D in0)
    if prog.kind == "mcast1d_in0":
        senders = in0_b * in0_dram + prog.cores * in1_b
    elif prog.kind == "mcast1d_in1":
        senders = prog.cores * in0_b * in0_dram + in1_b
    else:
        senders = prog.cores_y * in0_b * in0_dram + prog.cores_x * in1_b
    move = max(in0_b, in1_b) / core_bw
    step_move = move
    step = max(compute, step_move, senders / dram_bw)
    n_blocks = _cdiv(kt, kw)
    out_blocks = (prog.per_core_m // h) * (prog.per_core_n // w)
    total = out_blocks * (step_move + n_blocks * step)
    if row["out_storage_type"] == "DRAM":
        out_bytes = prog.per_core_m * prog.per_core_n * t
        total += max(out_bytes / core_bw, prog.cores * out_bytes / dram_bw)
    return total


_PROGRAMS: dict[tuple, Program] = {}  # the program depends on the row, not the parameters


def predict_ns(row: dict, chip: Chip, p: dict[str, float], dram_eff: float) -> tuple[float, Program]:
    """The time the benchmark reports for `row` (ns) and the program it runs."""
    key = (chip.name, row["config"], row["m"], row["k"], row["n"], row["grid_size"],
           row["dtype"], row["in0_storage_type"])
    prog = _PROGRAMS.get(key)
    if prog is None:
        prog = _PROGRAMS[key] = program(row, chip)
    dev = p["launch_ns"] + device_ns(row, chip, prog, p, dram_eff)
    if row["use_trace"] == "True":
        return dev, prog
    host = p["host_tuned_ns"] if row["config"] == "hand_tuned" else p["host_oob_ns"]
    return max(host, dev), prog


def flops(row: dict) -> float:
    return 2.0 * int(row["m"]) * int(row["k"]) * int(row["n"])

