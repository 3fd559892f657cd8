"""The action ledger: what the hardware did, counted where the timing is computed.

Every engine that spends time on work also records the work here, with the same numbers
its timing used: a GEMM tile's m·n·k MACs at its operand width, a DMA's wire bytes at the
memory, on every link of its path and at the TCM port, a fetch's or store's bytes at the
TCM and the register file, a vector op's busy lane-cycles, an M_CPU command packet's bytes
on its links. Energy (kernbench.report.energy) prices these counts after the run; nothing
here feeds back into timing.

Counts are kept in total and per command (`cmd.meta["seq"]`, set when the command is
tracked), so a CMDQ entry's and a layer's energy come from the same counts as the total.
With `record_events` (tracing on) each record also keeps its time interval, from which the
trace's power counter track is built.

Actions (unit):
  mac_int4, mac_int8, mac_fp16, mac_fp32   MACs by operand width (max of W and A bits)
  math_lane_cycle                          SIMD lane-cycles of pe_math
  hbm_byte, sram_byte                      bytes read or written at HBM / shared SRAM
  tcm_read_byte, tcm_write_byte            bytes through the TCM port, by direction
  rf_write_byte, rf_read_byte              register file: bytes fetched in / stored out
  mesh_hop_byte                            bytes × router-to-router links crossed
  port_byte                                bytes × local port links (PE/M_CPU/HBM/SRAM ↔ router)
  ucie_byte                                bytes × die-to-die links crossed
  chip_link_byte                           bytes × chip-to-chip links crossed
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kernbench.common.pe_commands import PeCommand

ACTIONS = ("mac_int4", "mac_int8", "mac_fp16", "mac_fp32", "math_lane_cycle", "hbm_byte",
           "sram_byte", "tcm_read_byte", "tcm_write_byte", "rf_write_byte", "rf_read_byte",
           "mesh_hop_byte", "port_byte", "ucie_byte", "chip_link_byte")

# link kind (topology.LinkSpec.kind) → the action a byte on it counts as
LINK_ACTION = {"mesh": "mesh_hop_byte", "pe": "port_byte", "hbm_port": "port_byte",
               "sram_port": "port_byte", "ucie": "ucie_byte",
               "chip_link": "chip_link_byte"}


def mac_action(bits: int) -> str:
    """The MAC action of an operand width: ≤4 int4, ≤8 int8, ≤16 fp16/bf16, else fp32."""
    if bits <= 4:
        return "mac_int4"
    if bits <= 8:
        return "mac_int8"
    if bits <= 16:
        return "mac_fp16"
    return "mac_fp32"


class ActionLedger:
    """Action counts in total, per command seq, and (optionally) as timed events.

    `group_by` is the command `meta` key the per-command counts are kept under: "seq"
    (one row per command) or e.g. "layer_id" (one row per layer, for runs that keep no
    per-command record; `for_seqs([layer_id])` then reads a layer)."""

    def __init__(self, link_kinds: Mapping[str, str], record_events: bool = False,
                 group_by: str = "seq") -> None:
        self._link_action = {lid: LINK_ACTION[k] for lid, k in link_kinds.items()}
        # a path (tuple of link servers) → its (action, links of that action), action-sorted
        self._path_actions: dict[tuple[Any, ...], tuple[tuple[str, int], ...]] = {}
        self.totals: dict[str, int] = dict.fromkeys(ACTIONS, 0)
        self.group_by = group_by
        self.by_seq: dict[Any, dict[str, int]] = {}
        self.record_events = record_events
        #: (start_ns, end_ns, action, amount), in record order (deterministic)
        self.events: list[tuple[float, float, str, int]] = []

    def add(self, cmd: PeCommand | None, action: str, amount: int, start: float,
            end: float) -> None:
        """Count `amount` of `action`, done by `cmd` (or None) during [start, end]."""
        if amount <= 0:
            return
        self.totals[action] += amount
        if cmd is not None:
            seq = cmd.meta.get(self.group_by)
            if seq is not None:
                row = self.by_seq.get(seq)
                if row is None:
                    row = self.by_seq[seq] = {}
                row[action] = row.get(action, 0) + amount
        if self.record_events:
            self.events.append((start, end, action, amount))

    def count(self, cmd: PeCommand | None, items: Iterable[tuple[str, int]], start: float,
              end: float) -> None:
        """`add` of each (action, amount) of `items`, in order: one call for what one
        reservation did."""
        totals = self.totals
        row = None
        seq = cmd.meta.get(self.group_by) if cmd is not None else None
        events = self.events if self.record_events else None
        for action, amount in items:
            if amount <= 0:
                continue
            totals[action] += amount
            if seq is not None:
                if row is None:
                    row = self.by_seq.get(seq)
                    if row is None:
                        row = self.by_seq[seq] = {}
                row[action] = row.get(action, 0) + amount
            if events is not None:
                events.append((start, end, action, amount))

    def _actions_of(self, links: Iterable[Any]) -> tuple[tuple[str, int], ...]:
        """A path's (action, links of that action), action-sorted, computed once per path."""
        key = links if links.__class__ is tuple else tuple(links)
        acts = self._path_actions.get(key)
        if acts is None:
            per: dict[str, int] = {}
            for s in key:
                a = self._link_action[s.id]
                per[a] = per.get(a, 0) + 1
            acts = self._path_actions[key] = tuple((a, per[a]) for a in sorted(per))
        return acts

    def path_actions(self, links: Iterable[Any]) -> tuple[tuple[str, int], ...]:
        """A path's (action, links of that action), action-sorted: what `links` counts,
        for a caller that counts the same path many times (`count_path`)."""
        return self._actions_of(links)

    def links(self, cmd: PeCommand | None, links: Iterable[Any], nbytes: int, start: float,
              end: float) -> None:
        """`nbytes` over each link of `links` (servers whose id is a topology link)."""
        self.count_path(cmd, self._actions_of(links), nbytes, start, end)

    def count_path(self, cmd: PeCommand | None, acts: tuple[tuple[str, int], ...],
                   nbytes: int, start: float, end: float) -> None:
        """`links` of a path whose `path_actions` are `acts`."""
        if nbytes <= 0 or not acts:
            return
        totals = self.totals
        seq = cmd.meta.get(self.group_by) if cmd is not None else None
        row = None
        if seq is not None:
            row = self.by_seq.get(seq)
            if row is None:
                row = self.by_seq[seq] = {}
        events = self.events if self.record_events else None
        for action, n in acts:
            amount = n * nbytes
            totals[action] += amount
            if row is not None:
                row[action] = row.get(action, 0) + amount
            if events is not None:
                events.append((start, end, action, amount))

    def dma(self, cmd: PeCommand | None, space: str, nbytes: int, links: Iterable[Any],
            tcm: str | None, start: float, end: float) -> None:
        """A transfer between memory `space` ("hbm" | "sram") and a PE: the memory access,
        the links between, and the TCM port (`tcm` "read" | "write", None when it bypasses
        the TCM, e.g. weights streamed into the array)."""
        items = [("hbm_byte" if space == "hbm" else "sram_byte", nbytes)]
        items += [(a, n * nbytes) for a, n in self._actions_of(links)]
        if tcm is not None:
            items.append((f"tcm_{tcm}_byte", nbytes))
        self.count(cmd, items, start, end)

    def for_seqs(self, seqs: Iterable[Any]) -> dict[str, int]:
        """Summed counts of the given commands (e.g. one CMDQ entry, one layer)."""
        out: dict[str, int] = {}
        for s in seqs:
            for a, n in self.by_seq.get(s, {}).items():
                out[a] = out.get(a, 0) + n
        return out
