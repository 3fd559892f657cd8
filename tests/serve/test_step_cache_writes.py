"""`--step-cache FILE` when the file cannot be written, or changes under a run: the run's
results never depend on the cache, so a cache it cannot keep costs speed, not the run."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.errors import InputError
from kernbench.host.serve import step_cache
from kernbench.host.serve.step_cache import StepCache

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "hf_configs" / "tiny-llama.json"
IDENT = "b" * 64


def _serve(tmp: Path, cache: Path) -> int:
    trace = tmp / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,2\n")
    return main(["serve", str(TINY), "-t", "small", "--out", str(tmp / "o"), "--quiet",
                 "--trace", str(trace), "--workers", "1", "--step-cache", str(cache)])


def _cache(path: Path) -> str:
    StepCache(path, IDENT).put((1, 1, 8), 100.0)
    return path.read_text()


def test_a_file_that_is_not_text_is_refused_as_a_step_cache(tmp_path, capsys):
    f = tmp_path / "c.json"
    f.write_bytes(b'{"\xdf\xff": 1}')
    with pytest.raises(InputError) as e:
        StepCache(f, IDENT)
    assert e.value.field == "--step-cache"
    assert "not a kernbench step cache: not UTF-8" in str(e.value)


def test_a_cache_that_cannot_be_written_is_read_and_left_as_it_is(tmp_path, capsys,
                                                                  monkeypatch):
    f = tmp_path / "c.json"
    text = _cache(f)
    monkeypatch.setattr(step_cache, "_unwritable", lambda _p: "Permission denied")
    cache = StepCache(f, IDENT)
    assert cache.programs == {(1, 1, 8): 100.0} and not cache.writable
    assert "cannot be written (Permission denied); its programs are used" in \
        capsys.readouterr().err
    cache.put((2, 1, 8), 200.0)
    assert cache.get((2, 1, 8)) == 200.0 and f.read_text() == text


def test_a_run_with_a_cache_it_cannot_write_finishes(tmp_path, capsys, monkeypatch):
    f = tmp_path / "c.json"
    text = _cache(f)
    monkeypatch.setattr(step_cache, "_unwritable", lambda _p: "Operation not permitted")
    assert _serve(tmp_path, f) == 0
    assert (tmp_path / "o" / "requests.csv").is_file() and f.read_text() == text
    assert "cannot be written (Operation not permitted)" in capsys.readouterr().err


def test_a_new_cache_that_cannot_be_made_is_refused_before_the_run(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setattr(step_cache, "_unwritable", lambda _p: "Read-only file system")
    assert _serve(tmp_path, tmp_path / "new.json") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "new.json" in err[0] and "--step-cache" in err[0]
    assert "cannot be written (Read-only file system)" in err[0]
    assert not (tmp_path / "o").exists() and not (tmp_path / "new.json").exists()


def test_unwritable_opens_the_file_and_makes_a_file_beside_it(tmp_path, monkeypatch):
    f = tmp_path / "c.json"
    assert step_cache._unwritable(f) is None  # no file yet: a probe beside it
    text = _cache(f)
    assert step_cache._unwritable(f) is None and f.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]  # no probe left
    real = Path.open

    def refuse(self, mode="r", *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        if "a" in mode or "x" in mode:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(self, mode, *a, **k)

    monkeypatch.setattr(Path, "open", refuse)
    assert step_cache._unwritable(f) == "Permission denied"


def test_a_write_that_fails_during_a_run_stops_the_writes_not_the_run(tmp_path, capsys,
                                                                      monkeypatch):
    f = tmp_path / "c.json"
    text = _cache(f)
    cache = StepCache(f, IDENT)

    def full(*_a: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    cache.put((2, 1, 8), 200.0)
    monkeypatch.undo()
    assert "writing it failed: No space left on device" in capsys.readouterr().err
    assert f.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]
    cache.put((4, 1, 8), 400.0)  # no more writes, and no second note
    assert f.read_text() == text and capsys.readouterr().err == ""
    assert cache.get((4, 1, 8)) == 400.0


def test_a_file_that_stops_being_a_cache_during_a_run_is_left_as_it_is(tmp_path, capsys):
    f = tmp_path / "c.json"
    _cache(f)
    cache = StepCache(f, IDENT)
    f.write_text("my notes\n")  # the user reused the name while the run went on
    cache.put((2, 1, 8), 200.0)
    assert f.read_text() == "my notes\n"
    assert "no longer a step cache" in capsys.readouterr().err
    assert json.loads(_cache(tmp_path / "d.json"))["kind"] == step_cache.KIND
