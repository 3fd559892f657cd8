"""VE_FUSED_TILE (ADR-0724): several vector-engine ops in one pass over a tile.

A GEMM epilogue is a chain of vector ops on one tile: dequantize (scale, bias), an
activation or a residual add, a quantize for the next GEMM. As separate entries each pays
a command round trip through the Control FSM and a TCM fetch and store of the tile. This
entry runs the chain as one command: the steps are ordinary VE entries (their own fields
and TCM operands) executed one after another on the same vector engine; each step after
the first takes the previous step's result as its input ``in``, which is never stored.

- Timing: one MathCmd. Fetch: every operand the steps read from TCM except the chained
  inputs; store: the last step's output; pe_math busy: the sum of the steps' cycles (each
  keeps its pipeline fill, `pe_math.stage_cycles`).
- Data: the data pass's ``chain`` op applies each step's own op in turn, casting every
  intermediate result to that step's output type, so the result is bit-identical to the
  separate entries.
- Validation: at least two steps; each a single-output vector opcode (not itself fused),
  without ``ve_id`` (the entry's applies) or ids of its own; step i's ``in`` operand is
  step i-1's ``out`` (same bank and offset, same element count, the bit width it wrote);
  an intermediate is at least 8 bits wide (not packed).
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError

from kernbench.cmdq.opcodes.base import (
    DataEnv,
    Lowering,
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
    """(ADR-0724) A chain of vector-engine ops on one tile in one command: ``steps`` are
    VE entries (opcode and fields, no id / pe / ve_id); each step after the first reads
    the previous step's result as its ``in``; only the last step's ``out`` is stored."""

    math_op: ClassVar[str] = "chain"
    opcode: Literal["VE_FUSED_TILE"] = "VE_FUSED_TILE"
    steps: list[dict[str, Any]] = Field(
        min_length=2, description="The chained VE entries, first to last (ADR-0724).")

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

    @staticmethod
    def _step_problem(ranges: tuple[TcmRange, ...]) -> str | None:
        """Why a step cannot be chained (None: it can): it must read ``in`` and write
        exactly one operand, ``out``, without reading it."""
        if not any(r.role == "in" and "r" in r.access for r in ranges):
            return "a step must read an operand 'in'"
        writes = [r for r in ranges if "w" in r.access]
        if len(writes) != 1 or writes[0].role != "out" or writes[0].access != "w":
            return "a step must write one operand, 'out', and not read it"
        return None

    # ------------------------------------------------------------------ validation

    def rules(self, v: Rules) -> bool:
        """Every step parses; step i's ``in`` is step i-1's ``out``; no packed
        intermediate."""
        super().rules(v)
        try:
            steps = self._chained(0)
        except InputError as e:
            v.add(e.field, e.reason)
            return False
        ok = True
        for i, (step, ranges) in enumerate(steps):
            problem = self._step_problem(ranges)
            if problem:
                v.add(f"steps[{i}].opcode", problem)
                return False
            ok = step.rules(_StepRules(v, i)) and ok  # the step's own opcode rules
        if not ok:
            return False
        for i in range(1, len(steps)):
            prev, cur = steps[i - 1][1], steps[i][1]
            out = next(r for r in prev if r.role == "out")
            inp = next(r for r in cur if r.role == "in")
            if (inp.bank, inp.offset) != (out.bank, out.offset):
                v.add(f"steps[{i}].in_bank", f"step {i} must read step {i - 1}'s out (bank "
                      f"{out.bank} offset {out.offset}), not bank {inp.bank} offset "
                      f"{inp.offset}")
                ok = False
            elif (inp.elements, inp.qbits) != (out.elements, out.qbits):
                v.add(f"steps[{i}].in_bank", f"step {i} reads {inp.elements} values of "
                      f"{inp.qbits} bits where step {i - 1} wrote {out.elements} of "
                      f"{out.qbits}")
                ok = False
            elif out.qbits < 8:
                v.add(f"steps[{i - 1}].out_qbits", "an intermediate result must be at "
                      f"least 8 bits wide, got {out.qbits}")
                ok = False
        return ok

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
        """What the command fetches (every step's inputs but the chained ones) and the
        last step's output."""
        steps = self._chained(pe)
        reads = [r for i, (_, rs) in enumerate(steps) for r in rs
                 if "r" in r.access and not (i and r.role == "in")]
        last = [r for r in steps[-1][1] if "w" in r.access]
        return (*reads, *last)

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
        """The ``chain`` description: each step's own description (`steps`), and for the
        op log the external inputs (every step's but the chained ``in``) and the last
        step's output."""
        descs = [s.data(_StepEnv(s, env)) for s in self.parsed]
        addrs, shapes, dtypes, plan = [], [], [], []
        for i, d in enumerate(descs):
            if "dst_addrs" in d or d.get("input_spaces") or d.get("imm"):
                raise InputError(f"{self.parsed[i].opcode} cannot be a fused step (several "
                                 "outputs or operands outside TCM)", where=f"entry {self.id}",
                                 field=f"steps[{i}].opcode")
            first = 1 if i else 0  # a later step's input 0 is the previous result
            addrs += d["input_addrs"][first:]
            shapes += d["input_shapes"][first:]
            dtypes += d["input_dtypes"][first:]
            params = {k: v for k, v in d.items() if k not in (
                "op_kind", "op_name", "space", "input_addrs", "input_shapes", "input_dtypes",
                "dst_addr")}
            params["inputs"] = len(d["input_addrs"]) - first
            # how the step reads the chained value (a load of what the last step stored)
            params["in_shape"], params["in_dtype"] = d["input_shapes"][0], d["input_dtypes"][0]
            plan.append(params)
        last = descs[-1]
        return {"op_kind": "math", "op_name": "ve_fused_tile", "op": "chain",
                "space": env.space, "input_addrs": addrs, "input_shapes": shapes,
                "input_dtypes": dtypes, "dst_addr": last["dst_addr"],
                "shape_out": last["shape_out"], "dtype": last["dtype"], "steps": plan}
