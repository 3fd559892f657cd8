"""Load a topology: preset name or YAML file, `extends` overlays, `--set` overrides.

Resolution order: the named preset (or file) → each `extends` base beneath it, applied
bottom-up (a deep merge: mappings merge, everything else replaces) → `--set a.b.c=value`
overrides, whose values are parsed as YAML scalars (`64`, `os`, `true`, `[r0c0]`).
Every problem becomes one `InputError` line naming the file, the key path and the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kernbench.config.keys import known_keys
from kernbench.config.schema import TopologyConfig
from kernbench.errors import MAX_TEXT_BYTES, InputError, did_you_mean, read_input_text

PRESET_DIR = Path(__file__).parent / "presets"
DEFAULT_PRESET = "small"
MAX_CONFIG_BYTES = MAX_TEXT_BYTES
#: the top-level section `topology show --json` adds (peaks, area): derived from the rest,
#: so a file that carries it loads with it dropped and recomputed (docs/topologies.md)
COMPUTED_KEY = "computed"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _read_yaml(path: Path, label: str) -> dict[str, Any]:
    text = read_input_text(path, MAX_CONFIG_BYTES, label=label)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"malformed YAML: {problem}", file=label, where=where) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("top level must be a mapping", file=label)
    data.pop(COMPUTED_KEY, None)
    return data


def _resolve(source: str, seen: tuple[str, ...] = (),
             preset: bool = False) -> tuple[dict[str, Any], str]:
    """Return the merged raw mapping for a preset name or file, and its label. A file
    (or a device or FIFO, which reading refuses) wins over a preset of the same name, a
    folder never does, and a preset's `extends: NAME` of another preset (`preset`) never
    looks at the working directory."""
    path = Path(source)
    if not preset and (path.suffix in (".yaml", ".yml")
                       or (path.exists() and not path.is_dir())):
        label = str(path)
        data = _read_yaml(path, label)
        base_dir = path.parent
    elif (PRESET_DIR / f"{source}.yaml").exists():
        label = f"preset '{source}'"
        data = _read_yaml(PRESET_DIR / f"{source}.yaml", label)
        base_dir = PRESET_DIR
    else:
        raise InputError(
            f"no such preset or file{did_you_mean(source, preset_names())} "
            f"(presets: {', '.join(preset_names())})", file=source
        )
    if source in seen:
        raise InputError("'extends' forms a cycle", file=label, field="extends")
    parent = data.pop("extends", None)
    if parent is None:
        return data, label
    if not isinstance(parent, str):
        raise InputError("must be a preset name or a file path", file=label, field="extends")
    if (PRESET_DIR / f"{parent}.yaml").exists():
        base, _ = _resolve(parent, seen + (source,), preset=True)
    else:
        base, _ = _resolve(str(base_dir / parent), seen + (source,))
    return deep_merge(base, data), label


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def apply_override(data: dict[str, Any], assignment: str) -> dict[str, Any]:
    """Apply one `a.b.c=value` override to a raw mapping (returns a new mapping)."""
    if "=" not in assignment:
        raise InputError("expected PATH=VALUE", file="--set", where=assignment)
    path, _, raw = assignment.partition("=")
    keys = [k for k in path.strip().split(".") if k]
    if not keys:
        raise InputError("empty key path", file="--set", where=assignment)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    patch: dict[str, Any] = {keys[-1]: value}
    for k in reversed(keys[:-1]):
        patch = {k: patch}
    return deep_merge(data, patch)


def _error_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts)


def load_topology_config(
    source: str | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> TopologyConfig:
    """Load, merge and validate a topology config; raises InputError (one line) on bad input."""
    data, label = _resolve(source or DEFAULT_PRESET)
    for ov in overrides:
        data = apply_override(data, ov)
    try:
        return TopologyConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x.startswith("function-")))
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + did_you_mean(loc[-1], known_keys(TopologyConfig, loc))
        raise InputError(msg, file=label, field=_error_path(loc) or None) from None
