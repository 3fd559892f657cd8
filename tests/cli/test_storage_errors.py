"""A write the machine's storage refuses (a full disk, a quota, a read-only file system) is
one `error:` line and exit 2, with the staged `--out` removed; any other OSError is still
a bug (traceback, exit 3)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from kernbench.cli import main

TINY = Path(__file__).resolve().parents[1] / "hf_configs" / "tiny-llama.json"


def _serve(tmp_path: Path) -> int:
    return main(["serve", str(TINY), "-t", "small", "--requests", "2", "--rate", "1000",
                 "--prompt-len", "8", "--output-len", "2", "--quiet",
                 "--out", str(tmp_path / "o")])


def _refuse(code: int):  # noqa: ANN202
    def write(out: Path, *_a: object) -> None:
        out.mkdir(parents=True, exist_ok=True)
        raise OSError(code, "refused by the test", str(out / "stats.json"))
    return write


def test_a_full_disk_is_one_line_exit_2_and_nothing_left(tmp_path, capsys, monkeypatch):
    import kernbench.host.serve.run as serve_run

    monkeypatch.setattr(serve_run, "write_outputs", _refuse(errno.ENOSPC))
    assert _serve(tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # the file is the staged folder's (`--out` is moved in last)
    assert err[0].startswith("error: ") and err[0].endswith(
        "/stats.json: cannot write: refused by the test"), err
    assert not (tmp_path / "o").exists()
    assert not list(tmp_path.glob("*o*"))  # no staging folder left either


def test_another_os_error_is_still_an_internal_error(tmp_path, capsys, monkeypatch):
    import kernbench.host.serve.run as serve_run

    monkeypatch.setattr(serve_run, "write_outputs", _refuse(errno.EIO))
    assert _serve(tmp_path) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "internal error: OSError" in err


@pytest.mark.parametrize("code", [errno.EDQUOT, errno.EROFS, errno.EFBIG])
def test_quota_read_only_and_too_large_are_storage_errors(tmp_path, capsys, monkeypatch, code):
    import kernbench.host.serve.run as serve_run

    monkeypatch.setattr(serve_run, "write_outputs", _refuse(code))
    assert _serve(tmp_path) == 2
    assert "Traceback" not in capsys.readouterr().err
