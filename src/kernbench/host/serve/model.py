"""The served model: what `kernbench run` takes as MODEL, built for any step's shape.

`ServedModel.open(model, qconfig, workdir)` checks that MODEL can be built for any batch,
new-token and past-token count (a built-in name, a Hugging Face config.json, an ONNX model
with symbolic dims) and reads what the KV cache needs: the weight bytes, the KV bytes per
cached token (every layer, K and V, at the KV bitwidth) and the model's context (a
config.json's `max_position_embeddings` / `n_positions`; for an ONNX file, those of the
config.json beside it, as Optimum exports one; None when nothing says).
`simulate(shape, topo)` compiles and simulates one program through `host.run` (the
path `kernbench run --batch B --seq-len S --kv-len K` takes, block replay simulating
`replay_blocks` decoder blocks) and returns its ns. The program the step compiled is
simulated without validating it again against the topology's limits (`run` does): it
comes straight from the compiler's invariant checks and the CMDQ models, and a serving
run compiles hundreds of them.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernbench.compiler.hbm import HbmFullError
from kernbench.compiler.pipeline import load_model
from kernbench.errors import InputError
from kernbench.host.block_replay import SIMULATED_BLOCKS
from kernbench.host.llm import llm_facts
from kernbench.host.models import ShapeOptions, resolve_model
from kernbench.host.onnx_positions import position_rows
from kernbench.host.run import RunHooks, RunOptions, run_model
from kernbench.host.serve.step_cache import NO_ROUTING, RoutingOptions
from kernbench.models.hf_config import config_path, is_hf_config
from kernbench.report.stats import Stats
from kernbench.topology.model import Topology

_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length",
                 "seq_length")


def _quiet(*_: str) -> None:
    """Notes of each step's run (replay, PE choice) are not the serving run's business."""


@dataclass(frozen=True)
class ServedModel:
    model: Path
    qconfig: Path | None
    workdir: Path
    name: str
    weight_bytes: int
    kv_bytes_per_token: int
    context: int | None
    replay_blocks: int = SIMULATED_BLOCKS  # decoder blocks a step program simulates
    routing: RoutingOptions = NO_ROUTING  # an MoE model's (--routing, --routing-seed, same layers)
    cache_option: str = "--kv-fraction"  # the option that sized the KV cache (`_no_room`)

    @staticmethod
    def open(model: Path, qconfig: Path | None, workdir: Path,
             replay_blocks: int = SIMULATED_BLOCKS,
             routing: RoutingOptions = NO_ROUTING,
             cache_option: str = "--kv-fraction") -> ServedModel:
        """`replay_blocks`: the decoder blocks each program simulates before block replay
        (`run`'s default; another count is for measuring the replay). `routing`: what
        `run`'s --routing, --routing-seed and --routing-same-layers give an MoE model
        (refused, as `run` refuses it, for any other). `cache_option`: the option that
        sized the KV cache, blamed when a step has no room beside it."""
        model = Path(model)
        try:
            res = resolve_model(model, _shape(1, 1, 1, routing), workdir / "facts", qconfig)
        except InputError as e:
            # routing given to a model without experts is refused first, as `run` says it
            if routing == NO_ROUTING and ("apply to" in e.reason
                                          or "symbolic dims" in e.reason):
                raise InputError("serving builds steps of any batch and length: MODEL must be "
                                 "a built-in name, a Hugging Face config.json or an ONNX "
                                 "model with symbolic batch/sequence dims",
                                 file=str(model)) from None
            raise
        graph, _ = load_model(res.path, qconfig)
        facts = llm_facts(graph)
        if facts is None:
            raise InputError("not a language model (no attention layer): nothing to serve",
                             file=str(model))
        per_token = -(-facts.kv_cache_bytes // (facts.batch * (facts.seq_len + facts.kv_len)))
        # the model as the user named it, not the probe shape it was built at
        name = (facts.model if res.kind == "hf_config" else
                str(model) if res.kind == "builtin" else model.stem)
        return ServedModel(model, qconfig, workdir, name, facts.weight_bytes,
                           per_token, _context(model), replay_blocks, routing, cache_option)

    def simulate(self, shape: tuple[int, int, int], topo: Topology) -> float:
        """Simulated ns of one program (batch, new tokens, past tokens) on `topo`."""
        return float(self.run(shape, topo)["total_ns"])

    def run(self, shape: tuple[int, int, int], topo: Topology) -> Stats:
        """stats of one program (batch, new tokens, past tokens) on `topo`: compiled and
        simulated as `kernbench run --no-report` does (timing only; the compiled program
        is not re-validated)."""
        b, s, k = shape
        with tempfile.TemporaryDirectory(dir=self.workdir) as d:
            tmp = Path(d)
            res = resolve_model(self.model, _shape(b, s, k, self.routing), tmp / "model",
                                self.qconfig)
            opts = RunOptions(qconfig=self.qconfig, trace=False, report=False,
                              write_cmdq=False, write_weights=False, bundle=tmp / "bundle",
                              replay_blocks=self.replay_blocks, check_compiled=False,
                              source=str(self.model))  # warnings name the user's model
            try:
                return run_model(res.path, topo, tmp / "out", opts,
                                 RunHooks(note=_quiet)).stats
            except HbmFullError as e:
                raise self._no_room(shape, topo, e) from None

    def _no_room(self, shape: tuple[int, int, int], topo: Topology,
                 e: HbmFullError) -> InputError:
        """Why a step program does not fit the HBM, blamed on what can change it. One
        prompt with nothing cached (batch 1, no past tokens) is the least any request
        needs: the model does not fit the topology. A larger step holds more cached
        tokens, as many as the KV cache the options sized lets the policy batch (the
        bucket rule rounds past tokens up): the cache's option is at fault."""
        b, s, k = shape
        what = f"the step program of batch {b}, {s} new and {k} past tokens"
        if b == 1 and k == 0:
            return InputError(f"{what} does not fit the HBM of '{topo.name}': the model and "
                              f"one prompt of {s} tokens, nothing cached, do not fit this "
                              f"topology; use a larger one or shorter prompts ({e.reason})",
                              field="--topology")
        return InputError(f"{what} does not fit the HBM beside the KV cache: give the cache "
                          f"less (a lower {self.cache_option}) or use a larger topology "
                          f"({e.reason})", field=self.cache_option)


def _shape(batch: int, new: int, past: int, routing: RoutingOptions) -> ShapeOptions:
    """The shape options of one program, with the model's routing options."""
    r, seed, same = routing
    return ShapeOptions(batch, new, past, routing=r, routing_seed=seed, routing_same=same)


def _context(model: Path) -> int | None:
    """The model's positions: a config.json's context key; for an ONNX file, the fewer of
    that of the config.json beside it (as Hugging Face Optimum exports a model) and the
    rows of its position tables (`onnx_positions`: an export without a config.json beside
    it); else None."""
    if model.suffix == ".onnx" and model.is_file():
        limits = [n for n in (_config_context(model.parent / "config.json"),
                              position_rows(model)) if n is not None]
        return min(limits) if limits else None
    return _config_context(model)


def _config_context(model: Path) -> int | None:
    """A Hugging Face config.json's (or its folder's) context: the first of its context
    keys that holds a value, a whole number >= 1 (`64.0` or `"64"`, as some exporters
    write it); InputError naming the key when it holds anything else (an ignored bad
    value would serve requests beyond the context). None when no key holds a value."""
    if not (model.exists() and is_hf_config(model)):
        return None
    path = config_path(model)
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # resolve_model read it already: unreachable in practice
    if not isinstance(d, dict):
        return None
    for key in _CONTEXT_KEYS:
        v = d.get(key)
        if v is None:
            continue
        n = _json_whole(v)
        if n is None or n < 1:
            raise InputError(f"the model's context must be a whole number >= 1, got {v!r}",
                             file=str(path), field=key)
        return n
    return None


def _json_whole(v: object) -> int | None:
    """A JSON value as a whole number: an int, a float with no fraction, a string of
    digits (a trace's or an option's text is read by `workload._whole`)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().isdecimal() and v.strip().isascii():
        return int(v)
    return None
