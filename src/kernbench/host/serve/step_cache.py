"""A step cache on disk (`--step-cache FILE`): simulated programs kept across runs.

A serving run simulates each program shape once; a sweep of loads, or a re-run, needs the
same programs again. The file holds the programs' simulated ns in sections, one per
identity: the sha256 of the model file's bytes (or the built-in name), the qconfig file's
bytes, the topology after every override (not its name) and kernbench's version. A run
reads and adds to its own identity's section only, so a cached time is always the one the
simulator would give, and one file serves several models or topologies (a sweep over a
topology grid).
Sections another kernbench version wrote can never be read again by this one and are
dropped when the file is written, with a note. Any other file is refused (it is not
kernbench's to overwrite), and so is a step cache holding something other than programs
of positive lengths with finite times of at least a nanosecond, or one shape twice. The
file is rewritten atomically after each new program, merged with what another run
sharing it wrote meanwhile, so a run that is stopped keeps what it simulated. A file
that cannot be written is read and left as it is (a note says so; where none exists yet
and none can be made, the option is refused), and so is one that stops being a step
cache, or whose writing fails, during a run: the run goes on without keeping its
programs, since its results do not depend on the cache. (A file of
the earlier one-identity layout, `{"identity", "programs"}`, is read as one section of
an unknown version: used by a run of its identity, else dropped as stale.)
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import kernbench
from kernbench.errors import MAX_JSON_BYTES, InputError, read_input_text, warn
from kernbench.host.block_replay import SIMULATED_BLOCKS
from kernbench.topology.model import Topology

Shape = tuple[int, int, int]
Section = dict[str, object]  # {"kernbench": version, "programs": [[b, s, k, ns], ...]}

#: what the file's top level says it is
KIND = "kernbench step cache"


def _sha(path: Path | None) -> str | None:
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else str(path)


#: `run`'s --routing, --routing-seed and --routing-same-layers, as given (None: not given)
RoutingOptions = tuple[str | None, int | None, bool]
NO_ROUTING: RoutingOptions = (None, None, False)


def identity(model: Path, qconfig: Path | None, topo: Topology,
             replay_blocks: int = SIMULATED_BLOCKS,
             routing: RoutingOptions = NO_ROUTING) -> str:
    # the hardware, not its name: `large` and one chip of `large-x8` run the same programs
    blob = {"model": _sha(model), "qconfig": _sha(qconfig),
            "topology": topo.config.model_dump(mode="json", exclude={"name"}),
            "kernbench": kernbench.__version__}
    if replay_blocks != SIMULATED_BLOCKS:  # other programs (the default's caches stand)
        blob["replay_blocks"] = replay_blocks
    if routing != NO_ROUTING:  # an MoE model's other routing: other programs
        blob["routing"] = list(routing)
    text = json.dumps(blob, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class StepCache:
    """`get(shape)` / `put(shape, ns)` backed by `path` (None: in memory only), in the
    section of identity `ident`."""

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
        self.writable = True
        if self.path.exists():
            self.programs = _programs(self._read().get(ident))
            self.loaded = len(self.programs)
        why = _unwritable(self.path)
        if why is not None:
            if not self.path.exists():
                raise InputError(f"cannot be written ({why})", file=str(self.path),
                                 field="--step-cache")
            self.writable = False
            warn(f"--step-cache {self.path}: cannot be written ({why}); its programs are "
                 "used, the ones this run simulates are not kept")

    def _read(self) -> dict[str, Section]:
        """Every section of the file, checked (InputError if it is not a step cache)."""
        assert self.path is not None
        try:
            text = read_input_text(self.path, MAX_JSON_BYTES)
            # an empty file (`touch`, `mktemp`) is a cache with nothing in it yet
            return _sections(json.loads(text)) if text.strip() else {}
        except json.JSONDecodeError as e:
            why = f"not JSON ({e.msg} at line {e.lineno} column {e.colno})"
        except InputError as e:  # not text, too large, unreadable
            why = e.reason
        except ValueError as e:
            why = str(e)
        raise InputError(f"not a kernbench step cache: {why} (delete it or give another "
                         "file)", file=str(self.path), field="--step-cache")

    def get(self, shape: Shape) -> float | None:
        return self.programs.get(shape)

    def put(self, shape: Shape, ns: float) -> None:
        self.programs[shape] = ns
        if self.path is None or not self.writable:
            return
        sections: dict[str, Section] = {}
        if self.path.is_file():  # another run sharing the file may have added programs
            try:
                sections = self._read()
            except InputError as e:  # replaced since the run began: not ours to overwrite
                self._stop_writing(f"it is no longer a step cache: {e.reason}")
                return
            for k, v in _programs(sections.get(self.ident)).items():
                self.programs.setdefault(k, v)
        stale = [i for i, sec in sections.items()
                 if i != self.ident and sec["kernbench"] != kernbench.__version__]
        if stale:
            warn(f"--step-cache {self.path}: dropped the programs of {len(stale)} other "
                 "kernbench version(s), which this version cannot use")
        mine = {"kernbench": kernbench.__version__,
                "programs": [[*k, v] for k, v in sorted(self.programs.items())]}
        keep = {i: sec for i, sec in sections.items() if i not in stale} | {self.ident: mine}
        doc = {"kind": KIND, "caches": dict(sorted(keep.items()))}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as e:  # the disk filled, the file or its folder was locked
            tmp.unlink(missing_ok=True)
            self._stop_writing(f"writing it failed: {e.strerror or e}")

    def _stop_writing(self, why: str) -> None:
        """Keep the file as it is from now on; the run goes on (its results do not depend
        on the cache, only its speed)."""
        self.writable = False
        warn(f"--step-cache {self.path}: {why}; left as it is, and the programs this run "
             "simulates from now on are not kept")


def _unwritable(path: Path) -> str | None:
    """Why `path` (the cache file, or where it would be made) cannot be written, else None:
    the file itself opened for writing (without changing it), and a file made and removed
    beside it, as each write of the cache does."""
    try:
        if path.exists():
            with path.open("ab"):
                pass
        probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
        with probe.open("xb"):
            pass
        probe.unlink()
    except OSError as e:
        return e.strerror or str(e)
    return None


def _sections(doc: object) -> dict[str, Section]:
    """The sections of a decoded step cache; ValueError saying why if it is not one."""
    if isinstance(doc, dict) and set(doc) == {"identity", "programs"}:  # one-section layout
        doc = {"kind": KIND, "caches": {doc["identity"]: {"kernbench": None,
                                                          "programs": doc["programs"]}}}
    if not isinstance(doc, dict) or set(doc) != {"kind", "caches"} or doc["kind"] != KIND \
            or not isinstance(doc["caches"], dict):
        raise ValueError(f'its top level is not {{"kind": "{KIND}", "caches": {{...}}}}')
    for ident, sec in doc["caches"].items():
        if not isinstance(sec, dict) or set(sec) != {"kernbench", "programs"} \
                or not isinstance(sec["kernbench"], str | None) \
                or not isinstance(sec["programs"], list):
            raise ValueError(f'section {ident[:16]}: not {{"kernbench": VERSION, '
                             '"programs": [...]}')
        _programs(sec)  # checked now: a bad section is a bad file, whoever reads it
    return doc["caches"]


def _programs(section: Section | None) -> dict[Shape, float]:
    """A section's programs by shape; ValueError naming a bad row or a shape given twice."""
    programs: dict[Shape, float] = {}
    for row in (section or {}).get("programs", []):  # type: ignore[union-attr]
        if not isinstance(row, list) or len(row) != 4:
            raise _bad(row, " is not [batch, new tokens, past tokens, ns]")
        b, s, k, ns = row
        if not all(type(v) is int for v in (b, s, k)) or min(b, s) < 1 or k < 0:
            raise _bad(row, ": batch and new tokens must be integers >= 1, past tokens >= 0")
        if type(ns) not in (int, float) or not _MIN_NS <= ns < _MAX_NS:
            raise _bad(row, f": its time must be a number of ns in [{_MIN_NS:g}, {_MAX_NS:g})")
        if (b, s, k) in programs:
            raise _bad(row, ": its shape is given twice")
        programs[(b, s, k)] = float(ns)
    return programs


def _bad(row: object, why: str) -> ValueError:
    """The error of a program row that is not one (`why` follows the row as written)."""
    return ValueError(f"program {json.dumps(row)[:60]}{why}")


#: a program's time in ns above which a step cache is refused (about 11.6 days: no step
#: takes that long, and a run's integer nanoseconds stay far within 64 bits)
_MAX_NS = 1e15
#: and below which: no program of any chip ends within its first nanosecond
_MIN_NS = 1.0
