"""A step cache on disk (`--step-cache FILE`): simulated programs kept across runs.

A serving run simulates each program shape once; a sweep of loads, or a re-run, needs the
same programs again. The file holds the programs' simulated ns under an identity: the
sha256 of the model file's bytes (or the built-in name), the qconfig file's bytes, the
topology after every override and kernbench's version. A file of another identity is not
used (and is overwritten); so a cached time is always the one the simulator would give.
The file is rewritten atomically after each new program, so a run that is stopped keeps
what it simulated.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import kernbench
from kernbench.errors import MAX_JSON_BYTES, InputError, read_input_text
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
        if self.path is not None and self.path.is_file():
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        try:
            doc = json.loads(read_input_text(self.path, MAX_JSON_BYTES))
            if not isinstance(doc, dict) or doc.get("identity") != self.ident:
                return
            for b, s, k, ns in doc["programs"]:
                self.programs[(int(b), int(s), int(k))] = float(ns)
        except (ValueError, KeyError, TypeError):
            raise InputError("not a kernbench step cache (delete it or give another file)",
                             file=str(self.path), field="--step-cache") from None
        self.loaded = len(self.programs)

    def get(self, shape: Shape) -> float | None:
        return self.programs.get(shape)

    def put(self, shape: Shape, ns: float) -> None:
        self.programs[shape] = ns
        if self.path is None:
            return
        rows = [[*k, v] for k, v in sorted(self.programs.items())]
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"identity": self.ident, "programs": rows}) + "\n",
                       encoding="utf-8")
        os.replace(tmp, self.path)
