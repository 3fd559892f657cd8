"""PE_GEMM `tile_fpu_v1`: a tile matrix engine of the Tenstorrent Tensix kind.

Each issue multiplies a `rows` × `depth` block of the first operand by a `depth` × `cols`
block of the second (Tensix: 8 × 16 by 16 × 16, 2048 multiply-adds per cycle, tt-metal
tech_reports/matrix_engine). A product narrower than a block still costs the whole issue,
so an (m, n, k) tile takes

    ceil(m / rows) · ceil(k / depth) · ceil(n / cols) · passes(math_fidelity)

cycles, where LoFi is one pass and HiFi2 / HiFi3 / HiFi4 two, three and four. A 32 × 32 ×
32 tile therefore costs 16 / 32 / 48 / 64 cycles, the figures tt-metal's GEMM_FLOPS
report uses for its ideal cycles. The operand bitwidth does not change the rate: block
floats and bf16 are unpacked to the engine's own format before the multiply, and their
precision is what the fidelity passes trade against time.

Two optional spec values (both off by default) add what feeds the engine: with
`unpack_bytes_per_cycle` a 32 × 32 × 32 tile product takes at least the unpacker's time
for one 32 × 32 operand tile at the operand bits, and `tile_issue_cycles` adds a fixed
cost per tile product:

    n_tiles · (max(product cycles, tile bytes / unpack rate) + tile_issue_cycles)

with n_tiles = ceil(m / 32) · ceil(k / 32) · ceil(n / 32), rounded up to whole cycles.

With `stream_dst_tiles` (off by default) the unpacker and packer run beside the math, as
Tensix's unpack, math and pack threads do through double-buffered circular buffers and
the two halves of the destination register: a GEMM's output is produced in chunks of
`stream_dst_tiles` 32 × 32 tiles, so only the first chunk's operand fetch comes before
the math and only the last chunk's store after it (the FETCH and STORE stages keep those
shares); the other bytes cross the TCM port while the engine computes, and the GEMM
stage ends when both the math and that reservation are done.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from simpy.events import Event

from kernbench.common.pe_commands import StageSpec
from kernbench.components.actions import mac_action
from kernbench.components.arbiter import done_at, pending, token_key
from kernbench.components.builtin.pe_gemm import PeGemm
from kernbench.components.catalog import register
from kernbench.components.fabric import transfer
from kernbench.config.schema import FIDELITY_PHASES

if TYPE_CHECKING:
    from kernbench.config.schema import PeGemmSpec


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def tile_engine_cycles(m: int, n: int, k: int, rows: int, depth: int, cols: int,
                       fidelity: str) -> int:
    """Cycles of an (m, n, k) product on a rows × depth by depth × cols engine (module
    docstring); ValueError for a non-positive extent or an unknown fidelity."""
    for name, v in (("m", m), ("n", n), ("k", k), ("rows", rows), ("depth", depth),
                    ("cols", cols)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if fidelity not in FIDELITY_PHASES:
        raise ValueError(f"unknown math fidelity {fidelity!r} (known: {', '.join(FIDELITY_PHASES)})")
    return _ceil(m, rows) * _ceil(k, depth) * _ceil(n, cols) * FIDELITY_PHASES[fidelity]


@register("pe_gemm", "tile_fpu_v1")
class TileFpu(PeGemm):
    """The PE_GEMM engine with the tile-engine cycle count instead of the systolic one,
    and optionally its operands streamed beside the math (module docstring)."""

    def fed_stages(self, fetch: StageSpec, gemm: StageSpec,
                   store: StageSpec) -> list[StageSpec]:
        """With `stream_dst_tiles`: FETCH keeps the first chunk's share of the bytes, STORE
        the last chunk's, and the GEMM stage carries the rest as `stream_fetch_nbytes` /
        `stream_store_nbytes` (module docstring); otherwise unchanged."""
        per = self.spec.stream_dst_tiles
        p = gemm[1]
        if per is None:
            return [fetch, gemm, store]
        chunks = _ceil(_ceil(p["m"], T) * _ceil(p["n"], T), per) * p.get("groups", 1)
        rd, wr = fetch[1].get("nbytes", 0), store[1].get("nbytes", 0)
        rd0, wr0 = _ceil(rd, chunks), _ceil(wr, chunks)
        return [(fetch[0], dict(fetch[1], nbytes=rd0)),
                (gemm[0], dict(p, stream_fetch_nbytes=rd - rd0, stream_store_nbytes=wr - wr0)),
                (store[0], dict(store[1], nbytes=wr0))]

    def connect(self) -> None:
        super().connect()
        self._tcm = (self.sim.pe_tcm(self.pe).port,)

    def service(self, token) -> float | Event:  # noqa: ANN001
        """Without streamed bytes as PE_GEMM; with them, the math and the bytes' TCM port
        reservation from this instant's grant (components.arbiter), ending at the later."""
        p = token.params
        rd, wr = p.get("stream_fetch_nbytes", 0), p.get("stream_store_nbytes", 0)
        if not rd and not wr:
            return super().service(token)
        busy, macs, bits = self._busy(p)
        ev = pending(self.env)
        self.sim.arbiter.request(token_key(token), self._streamed, token, rd, wr, busy, macs,
                                 bits, ev)
        return ev

    def _streamed(self, token, rd: int, wr: int, busy: float, macs: int,  # noqa: ANN001
                  bits: int, ev: Event) -> None:
        now = self.env._now
        end = transfer(now, rd + wr, self._tcm)
        acts = self.sim.actions
        cmd = token.pipeline_ctx.command
        acts.add(cmd, mac_action(bits), macs, now, now + busy)
        if rd:
            acts.add(cmd, "tcm_read_byte", rd, now, end)
            acts.add(cmd, "rf_write_byte", rd, now, end)
        if wr:
            acts.add(cmd, "rf_read_byte", wr, now, end)
            acts.add(cmd, "tcm_write_byte", wr, now, end)
        done_at(self.env, ev, max(now + busy, end))

    @classmethod
    def compute_cycles(cls, spec: PeGemmSpec, m: int, n: int, k: int, bits: int) -> int:
        cycles = tile_engine_cycles(m, n, k, spec.rows, spec.depth, spec.cols,
                                    spec.math_fidelity)
        if spec.unpack_bytes_per_cycle is None and not spec.tile_issue_cycles:
            return cycles
        return fed_tile_cycles(spec, m, n, k, bits)


T = 32  # the tile edge the unpacker and the issue cost count in


def fed_tile_cycles(spec: PeGemmSpec, m: int, n: int, k: int, bits: int) -> int:
    """Cycles of an (m, n, k) product counted per 32³ tile product with the unpacker's
    floor and the per-tile issue cost (module docstring)."""
    per = tile_engine_cycles(T, T, T, spec.rows, spec.depth, spec.cols, spec.math_fidelity)
    if spec.unpack_bytes_per_cycle is not None:
        per = max(per, T * T * bits / 8 / spec.unpack_bytes_per_cycle)
    tiles = _ceil(m, T) * _ceil(k, T) * _ceil(n, T)
    return math.ceil(tiles * (per + spec.tile_issue_cycles))
