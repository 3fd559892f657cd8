"""VE_FUSED_TILE: several vector-engine ops in one pass over a tile.

A GEMM epilogue is a chain of vector ops on one tile: dequantize (scale, bias), an
activation or a residual add, a quantize for the next GEMM. An attention block is another:
dequantize the scores, one online-softmax step (which also updates the row state), the
row scales of the probabilities, their quantize. As separate entries each op pays a
command round trip through the Control FSM and a TCM fetch and store of its tile. This
entry runs the ops as one command: the steps are ordinary VE entries (their own fields and
TCM operands) executed one after another on the same vector engine.

- Dataflow between steps: a step's operand that an earlier step wrote (the same bank,
  offset, element count and bits as that write; the latest such step) is *forwarded*:
  taken from that step's result, not fetched. Every step after the first reads its
  ``in`` that way. A read that overlaps an earlier step's write any other way is refused.
- What is written to TCM: every step's operands other than ``out`` (an online-softmax
  step's running state), the last step's ``out``, and the ``out`` of the steps listed in
  ``keep`` (read again by a later entry). Any other ``out`` is never written; its
  location is nominal.
- Timing: one MathCmd. Fetch: every operand read and not forwarded; store: what is
  written; pe_math busy: the sum of the steps' cycles (each keeps its pipeline fill,
  `pe_math.stage_cycles`).
- Data: the data pass's ``chain`` op applies each step's own op in turn; a forwarded
  operand is the earlier result cast to that step's output type and read back as the
  reading step's type, exactly as a store and a load would give it, so the result is
  bit-identical to the separate entries.
- Validation: at least two steps; each a vector math opcode (not itself fused), without
  ``ve_id`` (the entry's applies) or ids of its own; the forwarding rules above; a
  forwarded value is at least 8 bits wide (not packed).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError

from kernbench.cmdq.opcodes.base import (
    DataEnv,
    Lowering,
    NonNegInt,
    OnVectorEngine,
    Rules,
    TcmDataEnv,
    TcmRange,
)
from kernbench.cmdq.opcodes.registry import MODEL_BY_OPCODE, register_opcode
from kernbench.common.pe_commands import MathCmd, PeCommand
from kernbench.errors import InputError

#: fields an entry carries that a step does not (the fused entry's own)
_ENTRY_ONLY = ("id", "pe", "layer_id", "deps_before", "deps_after", "ve_id", "debug")


@dataclass
class _Flow:
    """A chain's TCM traffic: operands fetched (not an earlier step's result) and written;
    `problem` = (field, reason) when the steps break the forwarding rules."""

    fetched: list[TcmRange] = field(default_factory=list)
    stored: list[TcmRange] = field(default_factory=list)
    problem: tuple[str, str] | None = None


class _StepRules:
    """A step's view of the validator: its problems reported under ``steps[i].<field>``."""

    def __init__(self, v: Rules, i: int) -> None:
        self.limits = v.limits
        self._v, self._i = v, i

    def add(self, field: str | None, reason: str) -> None:
        self._v.add(f"steps[{self._i}]" + (f".{field}" if field else ""), reason)


class _StepEnv(TcmDataEnv):
    """A step's operand addresses, in the fused entry's TCM space."""

    def __init__(self, step: OnVectorEngine, parent: DataEnv) -> None:
        self.entry = step
        self.space = parent.space
        self.bank_bytes = parent.bank_bytes  # type: ignore[attr-defined]


@register_opcode
class VeFusedTile(OnVectorEngine):
    """Vector-engine ops on one tile in one command: ``steps`` are VE
    entries (opcode and fields, no id / pe / ve_id); a step's operand an earlier step
    wrote is forwarded (every step after the first reads its ``in`` so); written to TCM
    are the side outputs, the last step's ``out`` and the ``out`` of the ``keep`` steps
    (module doc)."""

    math_op: ClassVar[str] = "chain"
    opcode: Literal["VE_FUSED_TILE"] = "VE_FUSED_TILE"
    steps: list[dict[str, Any]] = Field(
        min_length=2, description="The chained VE entries, first to last.")
    keep: list[NonNegInt] = Field(
        default_factory=list, description="Steps before the last whose `out` is "
        "also written to TCM (a later entry reads it).")

    # ------------------------------------------------------------------ the steps

    @functools.cached_property
    def parsed(self) -> list[OnVectorEngine]:
        """The steps as opcode objects; InputError (field ``steps[i]...``) when one is not
        a valid single-output vector entry."""
        out = []
        for i, raw in enumerate(self.steps):
            where = f"steps[{i}]"
            op = raw.get("opcode")
            cls = MODEL_BY_OPCODE.get(op) if isinstance(op, str) else None
            if cls is None or not issubclass(cls, OnVectorEngine) or cls.timing != "math" \
                    or issubclass(cls, VeFusedTile):
                raise InputError(f"{op!r} is not a vector-engine tile opcode",
                                 where=f"entry {self.id}", field=f"{where}.opcode")
            bad = [k for k in _ENTRY_ONLY if k in raw]
            if bad:
                raise InputError(f"a step has no {bad[0]} of its own (the entry's applies)",
                                 where=f"entry {self.id}", field=f"{where}.{bad[0]}")
            try:
                step = cls.model_validate({**raw, "id": self.id, "pe": self.pe,
                                           "ve_id": self.ve_id})
            except ValidationError as e:
                err = e.errors()[0]
                loc = ".".join(str(x) for x in err["loc"])
                raise InputError(err["msg"], where=f"entry {self.id}",
                                 field=f"{where}.{loc}") from None
            out.append(step)
        return out

    def _chained(self, pe: int) -> list[tuple[OnVectorEngine, tuple[TcmRange, ...]]]:
        return [(s, s.tcm_ranges(pe)) for s in self.parsed]

    def _flow(self, pe: int) -> _Flow:
        """Which operands are fetched, forwarded and written (module doc), or the first
        reason the steps cannot run as one command."""
        steps = self._chained(pe)
        last = len(steps) - 1
        flow = _Flow()
        writes: list[tuple[int, TcmRange]] = []  # earlier steps' writes, in order
        for i, (_, ranges) in enumerate(steps):
            if not any(r.role == "out" and "w" in r.access for r in ranges):
                flow.problem = (f"steps[{i}].opcode", "a step must write an operand 'out'")
                return flow
            forwarded_in = False
            for r in (r for r in ranges if "r" in r.access):
                src = next(((j, w) for j, w in reversed(writes) if w.bank == r.bank
                            and w.offset < r.end and r.offset < w.end), None)
                if src is None:
                    flow.fetched.append(r._replace(access="r"))
                    continue
                j, w = src
                if (w.offset, w.elements, w.qbits) != (r.offset, r.elements, r.qbits):
                    flow.problem = (f"steps[{i}].{r.role}_bank", f"step {i} reads {r.elements} "
                                    f"values of {r.qbits} bits at bank {r.bank} offset "
                                    f"{r.offset} where step {j} wrote {w.elements} of "
                                    f"{w.qbits} at offset {w.offset}")
                    return flow
                if w.qbits < 8:
                    flow.problem = (f"steps[{j}].{w.role}_qbits" if w.role != "out" else
                                    f"steps[{j}].out_qbits", "an intermediate result must be "
                                    f"at least 8 bits wide, got {w.qbits}")
                    return flow
                forwarded_in |= r.role == "in"
            if i and not forwarded_in:
                j, w = next((j, w) for j, w in reversed(writes) if w.role == "out")
                flow.problem = (f"steps[{i}].in_bank", f"step {i}'s in must be an earlier "
                                f"step's result: must read step {j}'s out (bank {w.bank} "
                                f"offset {w.offset})")
                return flow
            for w in (r for r in ranges if "w" in r.access):
                writes.append((i, w))
                if w.role != "out" or i == last or i in self.keep:
                    flow.stored.append(w._replace(access="w"))
        return flow

    # ------------------------------------------------------------------ validation

    def rules(self, v: Rules) -> bool:
        """Every step parses and passes its own rules; `keep` names earlier steps; the
        forwarding rules of the module doc."""
        super().rules(v)
        try:
            steps = self._chained(0)
        except InputError as e:
            v.add(e.field, e.reason)
            return False
        ok = True
        for i, (step, _) in enumerate(steps):
            ok = step.rules(_StepRules(v, i)) and ok  # the step's own opcode rules
        bad = [k for k in self.keep if k >= len(steps) - 1]
        if bad:
            v.add("keep", f"step {bad[0]} is not an earlier step (the last step's out is "
                  f"always written; steps 0..{len(steps) - 2} can be kept)")
            ok = False
        if not ok:
            return False
        problem = self._flow(0).problem
        if problem:
            v.add(*problem)
            return False
        return True

    def _parsed_or_none(self) -> list[OnVectorEngine] | None:
        """The steps, or None when they do not parse (`rules` reports why)."""
        try:
            return self.parsed
        except InputError:
            return None

    def cost_ops(self) -> dict[str, str]:
        return {f"steps[{i}].{f}": op for i, s in enumerate(self._parsed_or_none() or [])
                for f, op in s.cost_ops().items()}

    # ------------------------------------------------------------------ bytes touched

    def tcm_ranges(self, pe: int = 0) -> tuple[TcmRange, ...]:
        """What the command fetches (every step's operands not forwarded) and what it
        writes (module doc)."""
        flow = self._flow(pe)
        return (*flow.fetched, *flow.stored)

    @property
    def work_elements(self) -> int:
        return sum(s.work_elements for s in self._parsed_or_none() or [])

    # ------------------------------------------------------------------ lowering

    def command(self, low: Lowering) -> PeCommand:
        rd, wr = self.traffic(low.pe)
        steps = []
        for s in self.parsed:
            p = s.command(low).params  # type: ignore[attr-defined]
            steps.append((p["op"], p["length"], p.get("rows", 1)))
        params = {"op": steps[0][0], "length": steps[0][1], "rows": steps[0][2],
                  "steps": steps, "ve_id": self.ve_id, "entry": self.id}
        return MathCmd(label=low.label, params=params, fetch_nbytes=rd, store_nbytes=wr,
                       meta=low.meta)

    def data(self, env: DataEnv) -> dict[str, Any]:
        """The ``chain`` description (docs/data-pass.md): the record's inputs are the
        operands fetched, in step order; per step its own op and params, where each of its
        inputs comes from (``srcs``: null for the next record input, [step, output] for
        a forwarded one) and its outputs' shapes and types; ``stored`` lists the
        [step, output] pairs written, in the order of the record's destinations."""
        last = len(self.parsed) - 1
        addrs, shapes, dtypes, plan, stored = [], [], [], [], []
        dests: list[tuple[int, list[int], str]] = []
        made: dict[int, tuple[int, int]] = {}  # address → (step, output) last written there
        for i, s in enumerate(self.parsed):
            senv = _StepEnv(s, env)
            d = s.data(senv)
            if d.get("input_spaces") or d.get("imm"):
                raise InputError(f"{s.opcode} cannot be a fused step (operands outside TCM)",
                                 where=f"entry {self.id}", field=f"steps[{i}].opcode")
            srcs: list[list[int] | None] = []
            for a, shp, dt in zip(d["input_addrs"], d["input_shapes"], d["input_dtypes"],
                                  strict=True):
                src = made.get(a)
                srcs.append(list(src) if src else None)
                if not src:
                    addrs.append(a)
                    shapes.append(shp)
                    dtypes.append(dt)
            multi = "dst_addrs" in d
            outs = (list(zip(d["dst_addrs"], d["shapes_out"], d["dtypes_out"], strict=True))
                    if multi else [(d["dst_addr"], d["shape_out"], d["dtype"])])
            out_addr = senv.addr("out")
            for o, (a, shp, dt) in enumerate(outs):
                made[a] = (i, o)
                if a != out_addr or i == last or i in self.keep:
                    stored.append([i, o])
                    dests.append((a, shp, dt))
            params = {k: v for k, v in d.items() if k not in (
                "op_kind", "op_name", "space", "input_addrs", "dst_addr", "dst_addrs")}
            params.update(srcs=srcs, multi=multi,
                          outs=[[shp, dt] for _, shp, dt in outs])
            plan.append(params)
        desc: dict[str, Any] = {
            "op_kind": "math", "op_name": "ve_fused_tile", "op": "chain", "space": env.space,
            "input_addrs": addrs, "input_shapes": shapes, "input_dtypes": dtypes,
            "steps": plan, "stored": stored}
        if len(dests) == 1:
            desc.update(dst_addr=dests[0][0], shape_out=dests[0][1], dtype=dests[0][2])
        else:
            desc.update(dst_addrs=[a for a, _, _ in dests],
                        shapes_out=[shp for _, shp, _ in dests],
                        dtypes_out=[dt for _, _, dt in dests])
        return desc
