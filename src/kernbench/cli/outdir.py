"""`--out DIR`: write a command's files into a staging folder, then move them in.

Contract:
- A run writes every file into a staging folder beside DIR; only when the command
  succeeds are the files moved into DIR, one `os.replace` each (a reader never sees a
  half-written file), and files of a previous run that this run did not write (an old
  `outputs.npz` after a run without `--verify`) are removed. A DIR that does not exist yet
  is the staging folder renamed in one step. On any error or Ctrl-C the staging folder is
  deleted and DIR is left as it was: nothing half-written. Ctrl-C during the move itself
  is held back until the move is done (cli.interrupt.deferred_interrupt): DIR then holds
  the whole new run, the staging folder is gone, and the command still ends with 130.
- DIR is marked as ours by a small `.kernbench-out` file listing what we wrote. A
  non-empty DIR without the marker is refused (we never delete or overwrite files we did
  not write), as are a DIR that is an existing file and a DIR we cannot write to.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from kernbench.cli.interrupt import deferred_interrupt, discard_stage, register_stage
from kernbench.errors import InputError

MARKER = ".kernbench-out"


def _marked_files(out: Path) -> list[str]:
    try:
        data = json.loads((out / MARKER).read_text(encoding="utf-8"))
        files = data.get("files", []) if isinstance(data, dict) else []
        return [f for f in files if isinstance(f, str)]
    except (OSError, ValueError):
        return []


def check_out(out: Path) -> None:
    """Refuse an --out we must not write to (InputError, exit 2)."""
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder", file=str(out), field="--out")
    if out.is_dir():
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise InputError(f"folder is not empty and has no {MARKER} marker (kernbench did "
                             "not write it); give a new or empty folder", file=str(out),
                             field="--out")
        if not os.access(out, os.W_OK | os.X_OK):
            raise InputError("folder is not writable", file=str(out), field="--out")
    anc = out.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise InputError(f"'{anc}' is not a folder", file=str(out), field="--out")


def _missing_top(d: Path) -> Path | None:
    """The outermost ancestor of `d` (or `d`) that does not exist yet; None if `d` does."""
    top = None
    while not d.exists() and d != d.parent:
        top, d = d, d.parent
    return top


def _fresh_dir(parent: Path, prefix: str) -> Path:
    """A new folder `parent/prefix<random>` with the umask's permissions (unlike mkdtemp's
    0700: the stage may become DIR itself)."""
    for _ in range(100):
        p = parent / f"{prefix}{secrets.token_hex(4)}"
        try:
            p.mkdir()
            return p
        except FileExistsError:
            continue
    raise FileExistsError(f"no free staging name under {parent}")


class OutDir:
    """Context manager: `with OutDir(path) as stage:` write into `stage`; committed into
    `path` on success, discarded on error. `keep` lists paths a stale-file cleanup must
    not touch (an input bundle that lives inside DIR)."""

    def __init__(self, path: Path, keep: Iterable[Path] = ()) -> None:
        self.out = Path(path)
        self.keep = [Path(k).resolve() for k in keep]
        self.stage: Path | None = None
        self.written: list[str] = []
        self.made: Path | None = None  # the outermost folder __enter__ created for DIR
        check_out(self.out)

    def __enter__(self) -> Path:
        parent = self.out.resolve().parent
        try:
            with deferred_interrupt():  # a stage is never made without being registered
                try:
                    self.made = _missing_top(parent)
                    parent.mkdir(parents=True, exist_ok=True)
                    self.stage = _fresh_dir(parent, f".{self.out.name}.kernbench-tmp-")
                except OSError as e:
                    raise InputError(f"cannot write here: {e.strerror}",
                                     file=str(self.out), field="--out") from None
                register_stage(self.stage)
        except KeyboardInterrupt:
            # a Ctrl-C held back above lands here, before `with` can call __exit__
            if self.stage is not None:
                discard_stage(self.stage)
            self._unmake()
            raise
        return self.stage

    def __exit__(self, exc_type, exc, tb) -> None:  # noqa: ANN001
        assert self.stage is not None
        with deferred_interrupt():
            try:
                if exc_type is None:
                    self._commit()
            finally:
                discard_stage(self.stage)
                if not self.out.exists():  # failed before DIR was made: no folder for it
                    self._unmake()

    def _unmake(self) -> None:
        """Remove the folders made for DIR's parent (`made` and those inside it, while
        empty): a failed run leaves nothing on disk."""
        if self.made is None:
            return
        d = self.out.resolve().parent
        while True:
            try:
                d.rmdir()
            except OSError:
                return  # not empty (another run's files) or gone
            if d == self.made or d == d.parent:
                return
            d = d.parent

    def _commit(self) -> None:
        assert self.stage is not None
        new = sorted(str(p.relative_to(self.stage)) for p in self.stage.rglob("*")
                     if p.is_file())
        if not self.out.exists():  # a new DIR: the stage becomes it in one rename
            (self.stage / MARKER).write_text(json.dumps({"files": new}, indent=1) + "\n",
                                             encoding="utf-8")
            self.out.parent.mkdir(parents=True, exist_ok=True)
            os.rename(self.stage, self.out)
            self.written = new
            return
        old = _marked_files(self.out) if self.out.is_dir() else []
        self.out.mkdir(parents=True, exist_ok=True)
        for rel in new:
            dst = self.out / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.stage / rel, dst)
        for rel in sorted(set(old) - set(new)):
            p = self.out / rel
            if ".." in Path(rel).parts or self._kept(p):
                continue
            if p.is_file():
                p.unlink()
            self._prune(p.parent)
        tmp = self.out / (MARKER + ".tmp")
        tmp.write_text(json.dumps({"files": new}, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.out / MARKER)
        self.written = new

    def _kept(self, p: Path) -> bool:
        r = p.resolve()
        return any(r == k or k in r.parents for k in self.keep)

    def _prune(self, d: Path) -> None:
        """Remove folders a stale file leaves empty, up to (not including) DIR."""
        root = self.out.resolve()
        d = d.resolve()
        while d != root and root in d.parents and d.is_dir() and not any(d.iterdir()):
            d.rmdir()
            d = d.parent
