"""The sweep spec: a YAML file validated by pydantic (docs/sweep.md, schemas/sweep.schema.json).

    model: gpt2                     # or models: [gpt2, llama, path/to/model.onnx]
    topology: small                 # a preset name or a topology YAML file
    set: {cube.pe_template.pe_tcm.reserved_kib: 256}        # fixed overrides (optional)
    grid:                           # swept topology key paths (the paths --set takes)
      cube.pe_template.pe_gemm.rows: [16, 32]
      cube.pe_template.pe_tcm.capacity_kib: [1024, 2048]
    seq_len: [4, 8]                 # a value or a list (built-in models)
    kv_len: 0                       # a value or a list (built-in models; > 0 = decode)
    batch: 1                        # a value or a list (built-in models: 1)
    qconfig: [{weight: 8, activation: 8, kv: 8}, qconfig_w4.yaml]   # inline bits or files
    random: 5                       # optional: sample 5 points of the grid ...
    seed: 0                         # ... with this seed

`load_spec` reads and validates the file; every problem is one `InputError` line naming
the spec file and the key. Paths in the spec are relative to the spec file's folder.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from kernbench.errors import InputError

MAX_SPEC_BYTES = 1 << 20
KEY_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
Bits = Literal[2, 4, 8, 16, "fp16", "bf16", "fp32"]


def _as_list(v: object) -> list[Any]:
    """A scalar stands for a one-element list (`seq_len: 8` = `seq_len: [8]`)."""
    return v if isinstance(v, list) else [v]


# strict: `true` or `4.0` is not a length
PosInts = Annotated[list[Annotated[int, Field(ge=1, strict=True)]],
                    BeforeValidator(_as_list), Field(min_length=1)]
NonNegInts = Annotated[list[Annotated[int, Field(ge=0, strict=True)]],
                       BeforeValidator(_as_list), Field(min_length=1)]
Names = Annotated[list[Annotated[str, Field(min_length=1)]], BeforeValidator(_as_list),
                  Field(min_length=1)]
#: fields that take one value or a list (the JSON Schema says so: see schema_text)
ONE_OR_MANY = ("models", "seq_len", "kv_len", "batch", "qconfig", "qconfigs")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InlineQConfig(_Strict):
    """W / A / KV bit widths written in the spec (a qconfig's `default:` block)."""

    weight: Bits = Field(8, description="weight bits (or fp16 / bf16 / fp32)")
    activation: Bits = Field(8, description="activation bits")
    kv: Bits = Field(8, description="KV-cache bits")

    def label(self) -> str:
        """Short column label, e.g. W8A8KV8 or Wbf16Abf16KVbf16."""
        return f"W{self.weight}A{self.activation}KV{self.kv}"


QEntry = Annotated[str, Field(min_length=1)] | InlineQConfig
QEntries = Annotated[list[QEntry], BeforeValidator(_as_list), Field(min_length=1)]


def _int_text(v: object) -> object:
    """`prompt_len: 512` is the length "512" (a range needs quotes only for YAML's sake)."""
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


LenText = Annotated[str, BeforeValidator(_int_text), Field(min_length=1)]
PosFloats = Annotated[list[Annotated[float, Field(gt=0)]], BeforeValidator(_as_list),
                      Field(min_length=1)]


class ServeSpec(_Strict):
    """A load sweep (docs/serving.md): each point serves requests instead of running one
    step; `rate` and `policy` are swept axes, the rest is fixed."""

    rate: PosFloats = Field(description="Poisson arrival rates, requests/s (swept)")
    policy: Names = Field(["continuous"], description="scheduler policies (swept)")
    requests: int = Field(200, ge=1, strict=True, description="requests per point")
    prompt_len: LenText = Field("512", description="N, LO:HI or lognormal:...")
    output_len: LenText = Field("128", description="N, LO:HI or lognormal:...")
    seed: int = Field(0, strict=True, description="seed of arrivals and lengths")
    slo: str | None = Field(None, description="goodput objectives, e.g. ttft=1s,tpot=50ms")
    max_batch: int = Field(64, ge=1, strict=True, description="sequences running at once")
    max_batch_tokens: int = Field(8192, ge=1, strict=True, description="new tokens per step")
    block_tokens: int = Field(16, ge=1, strict=True, description="tokens per KV block")
    kv_fraction: float = Field(0.9, gt=0, le=1, description="HBM share of the KV cache")
    kv_blocks: int | None = Field(None, ge=1, strict=True,
                                  description="KV cache blocks, instead of kv_fraction "
                                              "[default: kv_fraction of the HBM]")
    prefill_chips: int | None = Field(None, ge=1, strict=True,
                                      description="disaggregated: chips that prefill "
                                                  "[default: half]")
    replay_blocks: int | None = Field(None, ge=3, strict=True,
                                      description="decoder blocks each step program "
                                                  "simulates before replaying the rest "
                                                  "[default: 4]")
    routing: str | None = Field(None, min_length=1,
                                description="an MoE config.json model's expert choice, as "
                                            "run's --routing: uniform | zipf | zipf:SKEW")
    routing_seed: int | None = Field(None, strict=True,
                                     description="seed of the routing's draw (--routing-seed)")
    routing_same_layers: bool = Field(False, strict=True,
                                      description="every MoE layer takes the first layer's "
                                                  "draw (--routing-same-layers)")
    step_cache: str | None = Field(None, min_length=1,
                                   description="a step cache file every point shares "
                                               "(relative to the spec file): each program "
                                               "is simulated once for the whole sweep")


class SweepSpec(_Strict):
    """One sweep: the cartesian product of models × qconfigs × shapes × grid values
    (or `random` samples of it)."""

    model: str | None = Field(None, min_length=1,
                              description="one model: a file or a built-in name (gpt2, ...)")
    models: Names | None = Field(None, description="several models (instead of `model`)")
    topology: str = Field("small", min_length=1, description="a preset name or a topology YAML")
    set_: dict[str, Any] = Field(default_factory=dict, alias="set",
                                 description="fixed overrides: key path → value")
    grid: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(
        default_factory=dict, description="swept topology key paths → list of values")
    seq_len: PosInts | None = Field(None, description="new tokens [default: 16, 1 for decode]")
    kv_len: NonNegInts = Field([0],
                               description="KV-cache length; > 0 builds a decode step")
    batch: PosInts = Field([1], description="batch size")
    qconfig: QEntries | None = Field(None, description="qconfig files or inline W/A/KV bits")
    qconfigs: QEntries | None = Field(None, description="same as `qconfig`")
    random: int | None = Field(None, ge=1, strict=True,
                               description="sample this many points of the grid")
    seed: int = Field(0, strict=True, description="seed of the `random` sample")
    serve: ServeSpec | None = Field(None, description="a load sweep: serve requests at each "
                                    "point (docs/serving.md)")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              title="kernbench sweep spec")

    @field_validator("grid", "set_")
    @classmethod
    def _paths(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if not KEY_PATH.match(key):
                raise ValueError(f"'{key}' is not a dotted key path (a.b.c)")
        return v

    @field_validator("grid")
    @classmethod
    def _distinct(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in v.items():
            seen = [json.dumps(x, sort_keys=True) for x in values]
            if len(set(seen)) != len(seen):
                raise ValueError(f"'{key}' lists a value twice")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> SweepSpec:
        if (self.model is None) == (self.models is None):
            raise ValueError("give exactly one of 'model' and 'models'")
        if self.qconfig is not None and self.qconfigs is not None:
            raise ValueError("give at most one of 'qconfig' and 'qconfigs'")
        if self.serve is not None and (self.seq_len is not None or self.kv_len != [0]
                                       or self.batch != [1]):
            raise ValueError("seq_len / kv_len / batch do not apply to a load sweep "
                             "('serve' builds every step's shape)")
        return self

    def model_list(self) -> list[str]:
        return [self.model] if self.model is not None else list(self.models or [])

    def qconfig_list(self) -> list[str | InlineQConfig | None]:
        """The qconfig axis; [None] = the compiler's default (none given)."""
        return list(self.qconfig or self.qconfigs or [None])


def schema_text() -> str:
    """The spec's JSON Schema, as committed in schemas/sweep.schema.json."""
    schema = SweepSpec.model_json_schema(by_alias=True)
    for name in ONE_OR_MANY:  # the model holds lists; the YAML may give one value
        prop = schema["properties"][name]
        alts = prop.pop("anyOf", None) or [{k: v for k, v in prop.items()
                                             if k not in ("default", "description", "title")}]
        arrays = [a for a in alts if a.get("type") == "array"]
        for key in [k for k in prop if k not in ("default", "description", "title")]:
            del prop[key]
        prop["anyOf"] = [arrays[0]["items"], *alts]
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _is_branch_tag(part: object) -> bool:
    """Pydantic's names for union branches in an error location (not keys of the spec)."""
    return isinstance(part, str) and ("[" in part or "-" in part or part in (
        "InlineQConfig", "ServeSpec", "str", "int", "list", "dict"))


def _error_line(e: ValidationError, label: str) -> InputError:
    errs = e.errors()
    # a union reports one error per branch: the deepest location is the specific one; of
    # equal depth an unknown key goes first (a misspelt key is also a missing one)
    err = max(errs, key=lambda x: (len(x["loc"]), x["type"] == "extra_forbidden"))
    loc = [x for x in err["loc"] if not _is_branch_tag(x)]
    if loc and loc[0] == "set_":
        loc[0] = "set"  # the field's name in the YAML (`set` is a Python builtin)
    path = "".join(f"[{x}]" if isinstance(x, int) else ("." if i else "") + str(x)
                   for i, x in enumerate(loc))
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        known = sorted(f.alias or n for n, f in SweepSpec.model_fields.items())
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        if len(loc) == 1 and not close and str(loc[0]) in ServeSpec.model_fields:
            close = [f"serve.{loc[0]}"]  # a serve option written at the top level
        msg = "unknown key" + (f" (did you mean '{close[0]}'?)" if close and len(loc) == 1
                               else "")
        if loc[-1] == "trace":  # serve's --trace, which a load sweep has no use for
            msg += ("; a load sweep draws Poisson arrivals at each rate: serve a recorded "
                    "trace with `kernbench serve --trace`")
    return InputError(msg, file=label, field=path or None)


def parse_spec(data: object, label: str) -> SweepSpec:
    """Validate a parsed spec mapping; one InputError line naming the key on failure."""
    if not isinstance(data, dict):
        raise InputError("a sweep spec must be a mapping", file=label)
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as e:
        raise _error_line(e, label) from None


def load_spec(path: Path) -> SweepSpec:
    """Read and validate a sweep spec YAML (yaml.safe_load, size-capped)."""
    label = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror})", file=label) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise InputError(f"larger than {MAX_SPEC_BYTES} bytes", file=label)
    try:
        data = yaml.safe_load(raw.decode("utf-8", errors="replace"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"malformed YAML: {problem}", file=label,
                         where=f"line {mark.line + 1}" if mark else None) from None
    return parse_spec(data, label)
