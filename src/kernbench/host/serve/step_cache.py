"""A step cache on disk (`--step-cache FILE`): simulated programs kept across runs.

A serving run simulates each program shape once; a sweep of loads, or a re-run, needs the
same programs again. The file holds the programs' simulated ns under an identity: the
sha256 of the model file's bytes (or the built-in name), the qconfig file's bytes, the
topology after every override and kernbench's version. A step cache of another identity
is not used and is replaced, with a warning; so a cached time is always the one the
simulator would give. Any other file is refused (it is not kernbench's to overwrite), and
so is a step cache holding something other than programs of positive lengths with finite,
positive times. The file is rewritten atomically after each new program, merged with
what another run sharing it wrote meanwhile, so a run that is stopped keeps what it
simulated.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

import kernbench
from kernbench.errors import MAX_JSON_BYTES, InputError, read_input_text, warn
from kernbench.topology.model import Topology

Shape = tuple[int, int, int]


def _sha(path: Path | None) -> str | None:
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else str(path)


def identity(model: Path, qconfig: Path | None, topo: Topology) -> str:
    blob = {"model": _sha(model), "qconfig": _sha(qconfig),
            "topology": topo.config.model_dump(mode="json"), "kernbench": kernbench.__version__}
    text = json.dumps(blob, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class StepCache:
    """`get(shape)` / `put(shape, ns)` backed by `path` (None: in memory only)."""

    def __init__(self, path: Path | None, ident: str) -> None:
        self.path = Path(path) if path is not None else None
        self.ident = ident
        self.programs: dict[Shape, float] = {}
        self.loaded = 0
        if self.path is None:
            return
        if self.path.is_dir():
            raise InputError("is a folder; give a file", file=str(self.path),
                             field="--step-cache")
        if not self.path.parent.is_dir():
            raise InputError(f"its folder {self.path.parent} does not exist",
                             file=str(self.path), field="--step-cache")
        if self.path.exists():
            self.programs = self._read(warn_other=True)
            self.loaded = len(self.programs)

    def _read(self, warn_other: bool) -> dict[Shape, float]:
        """The programs the file holds under this identity ({} under another one)."""
        assert self.path is not None
        try:
            doc = json.loads(read_input_text(self.path, MAX_JSON_BYTES))
            if not isinstance(doc, dict) or set(doc) != {"identity", "programs"} \
                    or not isinstance(doc["identity"], str):
                raise ValueError
            programs = {}
            for b, s, k, ns in doc["programs"]:
                if not all(type(v) is int for v in (b, s, k)) or min(b, s) < 1 or k < 0 \
                        or type(ns) not in (int, float) or not 0 < ns < _MAX_NS:
                    raise ValueError
                programs[(b, s, k)] = float(ns)
        except (ValueError, KeyError, TypeError):
            raise InputError("not a kernbench step cache (delete it or give another file)",
                             file=str(self.path), field="--step-cache") from None
        if doc["identity"] != self.ident:
            if warn_other:
                warn(f"--step-cache {self.path}: its programs are another model's, "
                     "qconfig's, topology's or kernbench version's; replaced by this run's")
            return {}
        return programs

    def get(self, shape: Shape) -> float | None:
        return self.programs.get(shape)

    def put(self, shape: Shape, ns: float) -> None:
        self.programs[shape] = ns
        if self.path is None:
            return
        if self.path.is_file():  # another run sharing the file may have added programs
            with contextlib.suppress(InputError):
                for k, v in self._read(warn_other=False).items():
                    self.programs.setdefault(k, v)
        rows = [[*k, v] for k, v in sorted(self.programs.items())]
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"identity": self.ident, "programs": rows}) + "\n",
                       encoding="utf-8")
        os.replace(tmp, self.path)


#: a program's time in ns above which a step cache is refused (about 11.6 days: no step
#: takes that long, and a run's integer nanoseconds stay far within 64 bits)
_MAX_NS = 1e15
