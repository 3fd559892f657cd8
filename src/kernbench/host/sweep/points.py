"""A sweep spec → its points: grid (or random) expansion, validation, content-hash IDs.

The points are the cartesian product, in this order (the last axis varies fastest):
models × qconfigs × (seq_len × kv_len × batch, built-in models only) × grid values in the
order the spec lists its keys. `random: N` takes N distinct indices of that product with
`random.Random(seed)` and keeps them in product order, so the order is the spec's.

A point's ID is the sha256 of a canonical JSON of what determines its result: the model
(a built-in name, or the sha256 of the file's bytes), the topology after all overrides
(the validated config, so `rows: 32` written or defaulted is the same point), the
qconfig's content, the shapes and kernbench's version. Same ID ⇒ same result, which is
what lets a re-run skip finished points.

Everything a spec can get wrong (unknown key path, invalid value, missing file) raises
one `InputError` line here, before any point runs. A combination of grid values that is
invalid only together (e.g. TCM capacity below the reserved region another key sets) is
not a spec error: that point carries the error and is recorded as failed.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kernbench
from kernbench.config import TopologyConfig, load_topology_config
from kernbench.errors import InputError
from kernbench.host.sweep.spec import InlineQConfig, SweepSpec
from kernbench.ir.qconfig import load_qconfig, parse_qconfig
from kernbench.models.builders import MODELS

MAX_POINTS = 100_000  # a full grid beyond this needs `random: N`


@dataclass(frozen=True)
class Cost:
    """Hardware size of a point's topology: the cost axes of the Pareto plot."""

    pes: int
    array_rows: int
    array_cols: int
    macs: int  # PEs × array rows × cols (× tensor engines per PE)
    tcm_kib: int  # all PEs
    hbm_gbs: float  # all cubes


@dataclass(frozen=True)
class Point:
    """One configuration to compile and simulate. Plain data: it crosses process and Ray
    boundaries. `topology` is the validated config as a mapping (None when the
    combination is invalid; then `error` says why and the point is not run)."""

    index: int
    id: str
    model: str  # as the spec writes it
    model_ref: str  # built-in name or absolute file path
    builtin: bool
    seq_len: int | None
    kv_len: int | None
    batch: int | None
    qconfig_label: str
    qconfig: dict[str, Any] | None
    params: tuple[tuple[str, Any], ...]  # (grid key path, value) in spec order
    topology: dict[str, Any] | None
    cost: Cost | None
    error: str | None = None
    serve: dict[str, Any] | None = None  # a load-sweep point: the serve options
    step_cache: str | None = None  # a load-sweep point: the step cache file (absolute)

    def describe(self) -> dict[str, Any]:
        """The point as JSON (written to points/ID/point.json)."""
        out = {"id": self.id, "model": self.model, "seq_len": self.seq_len,
               "kv_len": self.kv_len, "batch": self.batch, "qconfig": self.qconfig_label,
               "params": {k: v for k, v in self.params}, "version": kernbench.__version__}
        if self.serve is not None:
            out["serve"] = self.serve
        return out


def canonical(obj: object) -> str:
    """Canonical JSON: sorted keys, no spaces, so equal content hashes equally."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def point_id(model: dict[str, Any], topology: object, qconfig: object,
             shapes: dict[str, Any]) -> str:
    blob = {"model": model, "topology": topology, "qconfig": qconfig, "shapes": shapes,
            "kernbench": kernbench.__version__}
    return hashlib.sha256(canonical(blob).encode("utf-8")).hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class _Model:
    name: str
    ref: str
    builtin: bool
    identity: dict[str, Any]


def _models(spec: SweepSpec, base: Path, label: str) -> list[_Model]:
    key = "model" if spec.model is not None else "models"
    out = []
    for i, name in enumerate(spec.model_list()):
        where = key if key == "model" else f"models[{i}]"
        path = base / name
        if path.is_dir() and (path / "config.json").is_file():  # a Hugging Face model folder
            out.append(_Model(name, str(path.resolve()), False,
                              {"sha256": _file_sha256(path / "config.json")}))
        elif path.is_file():
            ident: dict[str, Any] = {"sha256": _file_sha256(path)}
            weights = path.with_name("weights.npz")
            if path.suffix == ".json" and weights.is_file():  # ir.json reads its weights
                ident["weights_sha256"] = _file_sha256(weights)
            out.append(_Model(name, str(path.resolve()), False, ident))
        elif name in MODELS:
            out.append(_Model(name, name, True, {"builtin": name}))
        else:
            raise InputError(f"'{name}' is neither a file nor a built-in model "
                             f"({', '.join(MODELS)})", file=label, field=where)
    return out


def _qconfigs(spec: SweepSpec, base: Path, label: str) -> list[tuple[str, dict | None]]:
    key = "qconfigs" if spec.qconfigs is not None else "qconfig"
    out: list[tuple[str, dict | None]] = []
    for i, q in enumerate(spec.qconfig_list()):
        if q is None:
            out.append(("default", None))
        elif isinstance(q, InlineQConfig):
            qc = parse_qconfig({"default": q.model_dump(mode="json")}, file=label)
            out.append((q.label(), qc.model_dump(mode="json")))
        else:
            path = base / q
            if not path.is_file():
                raise InputError(f"no such qconfig file '{q}'", file=label, field=f"{key}[{i}]")
            out.append((q, load_qconfig(path).model_dump(mode="json")))
    return out


def _shapes(spec: SweepSpec, models: list[_Model], label: str) -> list[tuple[int, int, int]]:
    if not any(m.builtin for m in models):
        if spec.seq_len is not None or spec.kv_len != [0] or spec.batch != [1]:
            raise InputError("seq_len / kv_len / batch apply to the built-in models "
                             f"({', '.join(MODELS)}); a model file's shapes are fixed",
                             file=label)
        return []
    if any(b != 1 for b in spec.batch):
        raise InputError("the built-in models are built with batch 1", file=label,
                         field="batch")
    out = [(s if s is not None else (1 if kv > 0 else 16), kv, b)
           for s in (spec.seq_len or [None]) for kv in spec.kv_len for b in spec.batch]
    return list(dict.fromkeys(out))  # the default seq_len may repeat a listed one


def _topology_source(spec: SweepSpec, base: Path) -> str:
    path = base / spec.topology
    if path.suffix in (".yaml", ".yml") or path.exists():
        return str(path)
    return spec.topology  # a preset name


def _assign(key: str, value: object) -> str:
    # JSON is YAML, so the value survives `--set`'s YAML parsing unchanged
    return f"{key}={json.dumps(value, ensure_ascii=False)}"


def _check_sets(spec: SweepSpec, source: str, label: str) -> tuple[list[str], dict[str, Any]]:
    """Validate topology + `set`; return the fixed overrides and the base config dump."""
    fixed = [_assign(k, v) for k, v in spec.set_.items()]
    try:
        base = load_topology_config(source, fixed)
    except InputError as e:
        where = "topology" if not e.field or not spec.set_ else "set"
        raise InputError(e.line(), file=label, field=where) from None
    return fixed, base.model_dump(mode="json")


def _check_grid(spec: SweepSpec, source: str, fixed: list[str], base: dict[str, Any],
                label: str) -> None:
    """Every grid key must name a topology field and every value must be valid for it."""
    for key, values in spec.grid.items():
        node: Any = base
        for part in key.split(".")[:-1]:
            if node is None:  # an optional section absent in the base: validation decides
                break
            if not isinstance(node, dict):
                break
            node = node.get(part)  # a missing part is an unknown key: validation says so
        if node is not None and not isinstance(node, dict):
            raise InputError(f"'{key.rpartition('.')[0]}' is not a mapping in the topology",
                             file=label, where="grid", field=key)
        for v in values:
            try:
                load_topology_config(source, [*fixed, _assign(key, v)])
            except InputError as e:
                f = e.field or ""
                if e.reason.startswith("unknown key") or f == key or f.startswith((key + ".", key + "[")):
                    raise InputError(f"value {json.dumps(v)}: {e.reason}", file=label,
                                     where="grid", field=key) from None
                # else: invalid with the base only; another grid key may make it valid


def cost_of(cfg: TopologyConfig) -> Cost:
    cubes = cfg.sip.count * cfg.sip.cubes.rows * cfg.sip.cubes.cols
    pes = cubes * len(cfg.cube.pe_layout)
    g = cfg.cube.pe_template.pe_gemm
    hbm = cfg.cube.hbm_ctrl
    return Cost(pes=pes, array_rows=g.rows, array_cols=g.cols,
                macs=pes * g.count * g.rows * g.cols,
                tcm_kib=pes * cfg.cube.pe_template.pe_tcm.capacity_kib,
                hbm_gbs=round(cubes * hbm.channels * hbm.channel_bw_gbs, 6))


def expand(spec: SweepSpec, spec_path: Path) -> list[Point]:
    """All points of a spec, in spec order; InputError (one line) for any spec mistake."""
    label, base_dir = str(spec_path), Path(spec_path).parent
    models = _models(spec, base_dir, label)
    qconfigs = _qconfigs(spec, base_dir, label)
    shapes = _shapes(spec, models, label) if spec.serve is None else []
    serving = _serve_axis(spec, label)
    _check_routing(spec, models, label)
    step_cache = _step_cache(spec, base_dir, label)
    source = _topology_source(spec, base_dir)
    fixed, base_cfg = _check_sets(spec, source, label)
    _check_grid(spec, source, fixed, base_cfg, label)
    keys = list(spec.grid)
    axes: list[list[Any]] = [list(spec.grid[k]) for k in keys]
    blocks = [(m, [qconfigs, shapes if m.builtin and shapes else [(None, None, None)],
                   serving, *axes]) for m in models]
    sizes = [math.prod(len(a) for a in ax) for _, ax in blocks]
    total = sum(sizes)
    if spec.random is not None and spec.random < total:
        picks = sorted(random.Random(spec.seed).sample(range(total), spec.random))
    elif total > MAX_POINTS:
        raise InputError(f"the grid has {total} points (more than {MAX_POINTS}); "
                         "sample it with 'random: N'", file=label, field="grid")
    else:
        picks = list(range(total))
    topo_cache: dict[str, tuple[dict | None, Cost | None, str | None]] = {}
    points = []
    for pos, idx in enumerate(picks):
        b = 0
        while idx >= sizes[b]:
            idx -= sizes[b]
            b += 1
        model, ax = blocks[b]
        combo = _decode(idx, [len(a) for a in ax])
        (qlabel, qc), (seq, kv, batch) = ax[0][combo[0]], ax[1][combo[1]]
        serve = ax[2][combo[2]]
        params = tuple((k, ax[3 + j][combo[3 + j]]) for j, k in enumerate(keys))
        overrides = [*fixed, *(_assign(k, v) for k, v in params)]
        ck = "\n".join(overrides)
        if ck not in topo_cache:
            topo_cache[ck] = _resolve(source, overrides)
        topo, cost, err = topo_cache[ck]
        if err is None and serve is not None:
            err = _serve_error(serve, topo)
        shape: dict[str, Any] = {"seq_len": seq, "kv_len": kv, "batch": batch}
        if serve is not None:
            shape["serve"] = serve
        pid = point_id(model.identity, topo if topo is not None else
                       {"source": source, "overrides": overrides}, qc, shape)
        points.append(Point(pos, pid, model.name, model.ref, model.builtin, seq, kv, batch,
                            qlabel, qc, params, topo, cost, err, serve,
                            step_cache if serve is not None else None))
    return points


def _serve_axis(spec: SweepSpec, label: str) -> list[dict[str, Any] | None]:
    """[None] for a step sweep; one serve-options mapping per (policy, rate) otherwise."""
    if spec.serve is None:
        return [None]
    from kernbench.host.serve.policies import DISAGGREGATED, POLICIES, STATIC
    from kernbench.host.serve.slo import parse_slo
    from kernbench.host.serve.workload import LengthSpec, poisson_requests

    sv = spec.serve
    try:  # every mistake found before any point runs
        prompt = LengthSpec.parse(sv.prompt_len, "serve.prompt_len")
        output = LengthSpec.parse(sv.output_len, "serve.output_len")
        parse_slo(sv.slo)
        for rate in sv.rate:  # each point's draw, as its serve run makes it (count, horizon)
            poisson_requests(sv.requests, rate, prompt, output, sv.seed)
    except InputError as e:
        raise InputError(_spec_words(e.reason), file=label, field=spec_key(e.field)) from None
    if sv.kv_blocks is not None and "kv_fraction" in sv.model_fields_set:
        raise InputError("give the KV cache's size as kv_blocks or kv_fraction, not both",
                         file=label, field="serve.kv_fraction")
    for i, name in enumerate(sv.policy):
        known = sorted([*POLICIES, DISAGGREGATED])
        if name not in known:
            raise InputError(f"unknown policy '{name}' (known: {', '.join(known)})",
                             file=label, field=f"serve.policy[{i}]")
    # an option no point uses is refused, as `kernbench serve` refuses it: ignored, it misleads
    if "max_batch_tokens" in sv.model_fields_set and set(sv.policy) == {STATIC}:
        raise InputError("the static policy has no per-step token budget (it batches whole "
                         "prompts) and no point uses another policy; drop it or sweep another "
                         "policy", file=label, field="serve.max_batch_tokens")
    if sv.prefill_chips is not None and DISAGGREGATED not in sv.policy:
        raise InputError("only the disaggregated policy splits chips, and no point uses it",
                         file=label, field="serve.prefill_chips")
    # the step cache decides no result (a cached time is the simulator's): not an option
    # of the point, so not in its id
    # (nor replay_blocks when not given: the points of earlier sweeps keep their ids)
    # (nor kv_blocks when not given; when given, it sizes the cache instead of kv_fraction)
    # (nor the routing options when none is given: they apply to MoE models only)
    fixed = spec.serve.model_dump(mode="json", exclude={"rate", "policy", "step_cache"} | (
        {"replay_blocks"} if spec.serve.replay_blocks is None else set()) | (
        {"kv_blocks"} if spec.serve.kv_blocks is None else {"kv_fraction"}) | (
        set() if _routing_given(sv) else set(ROUTING_KEYS)))
    # prefill_chips splits the chips of the disaggregated points only; static has no
    # per-step token budget
    return [{"policy": p, "rate": r, **fixed} | ({} if p == DISAGGREGATED else
                                                  {"prefill_chips": None})
            | ({"max_batch_tokens": None} if p == STATIC else {})
            for p in spec.serve.policy for r in spec.serve.rate]


#: the load sweep's keys of an MoE model's routing (serve's --routing, --routing-seed,
#: --routing-same-layers)
ROUTING_KEYS = ("routing", "routing_seed", "routing_same_layers")


def _routing_given(sv: Any) -> bool:  # noqa: ANN401
    """Whether the spec's `serve` section gives any routing option."""
    return sv.routing is not None or sv.routing_seed is not None or sv.routing_same_layers


def _check_routing(spec: SweepSpec, models: list[_Model], label: str) -> None:
    """Serve's routing options, refused before any point runs where `kernbench serve`
    refuses them (`check_routing`): a malformed routing, or a model that is not an MoE
    config.json."""
    sv = spec.serve
    if sv is None or not _routing_given(sv):
        return
    from kernbench.host.models import check_routing
    from kernbench.host.onnx_dims import ShapeOptions

    key = next(f"serve.{k}" for k in ROUTING_KEYS if getattr(sv, k) not in (None, False))
    shapes = ShapeOptions(routing=sv.routing, routing_seed=sv.routing_seed,
                          routing_same=sv.routing_same_layers)
    try:
        shapes.check()
        for m in models:
            check_routing(Path(m.ref), shapes)
    except InputError as e:
        raise InputError(e.reason, file=label, field=key) from None


def _serve_error(serve: dict[str, Any], topo: dict[str, Any] | None) -> str | None:
    """Why a load-sweep point cannot run on its topology (None: it can): a disaggregated
    point whose chips `ChipPools` cannot split fails here, before its model is loaded."""
    from kernbench.host.serve.chips import ChipPools
    from kernbench.host.serve.policies import DISAGGREGATED

    if serve["policy"] != DISAGGREGATED or topo is None:
        return None
    system = topo.get("system")
    try:
        ChipPools.of(system["chips"] if system else 1, serve.get("prefill_chips"),
                     "this point's topology")
    except InputError as e:  # worded as the spec's errors are (docs/sweep.md)
        return InputError(e.reason, field=spec_key(e.field)).line()
    return None


def _spec_words(reason: str) -> str:
    """A serve error's text as the spec says it: the options it names (`--rate`) are
    the spec's keys (`serve.rate`)."""
    return re.sub(r"(?<![\w-])--([a-z][a-z-]*)", lambda m: spec_key(m.group(0)), reason)


def spec_key(field: str | None) -> str:
    """A serve error's field as the spec names it: `--prefill-chips` is
    `serve.prefill_chips`; a field already named so stays."""
    if not field:
        return "serve"
    if field.startswith("--"):
        return "serve." + field[2:].replace("-", "_")
    return field


def _step_cache(spec: SweepSpec, base_dir: Path, label: str) -> str | None:
    """The shared step cache's absolute path (`serve.step_cache`), its folder checked."""
    if spec.serve is None or spec.serve.step_cache is None:
        return None
    path = (base_dir / spec.serve.step_cache).resolve()
    if path.is_dir() or not path.parent.is_dir():
        raise InputError(f"{spec.serve.step_cache}: "
                         + ("is a folder; give a file" if path.is_dir() else
                            f"its folder {path.parent} does not exist"),
                         file=label, field="serve.step_cache")
    if path.is_file():  # refused here, once, as serve refuses it; not by every point
        from kernbench.host.serve.step_cache import StepCache

        try:
            StepCache(path, "")
        except InputError as e:
            raise InputError(f"{spec.serve.step_cache}: {e.reason}", file=label,
                             field="serve.step_cache") from None
    return str(path)


def _decode(idx: int, radix: list[int]) -> list[int]:
    """Mixed-radix digits of idx, the last one fastest (itertools.product's order)."""
    out = []
    for r in reversed(radix):
        idx, d = divmod(idx, r)
        out.append(d)
    return out[::-1]


def _resolve(source: str, overrides: list[str]) -> tuple[dict | None, Cost | None, str | None]:
    try:
        cfg = load_topology_config(source, overrides)
    except InputError as e:
        return None, None, f"topology: {e.line()}"
    return cfg.model_dump(mode="json"), cost_of(cfg), None


def swept_keys(spec: SweepSpec, points: list[Point]) -> list[str]:
    """The columns that vary: model, qconfig, shapes (when more than one value), grid keys."""
    cols = []
    for name, get in (("model", lambda p: p.model), ("qconfig", lambda p: p.qconfig_label),
                      ("seq_len", lambda p: p.seq_len), ("kv_len", lambda p: p.kv_len),
                      ("batch", lambda p: p.batch),
                      ("policy", lambda p: (p.serve or {}).get("policy")),
                      ("rate", lambda p: (p.serve or {}).get("rate"))):
        if len({canonical(get(p)) for p in points}) > 1:
            cols.append(name)
    return cols + list(spec.grid)


__all__ = ["Cost", "Point", "canonical", "cost_of", "expand", "point_id", "spec_key",
           "swept_keys"]
