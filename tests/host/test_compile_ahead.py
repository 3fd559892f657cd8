"""Compile ahead (host.compile_ahead): a streamed program's compiler runs in a forked child
while the parent simulates. The chunks arrive in order and unchanged, a failure in the
child is raised in the parent with its own message, the child never outlives the stream,
and a run gives byte-identical outputs with and without it (one chip and the
tensor-parallel merge)."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernbench.cmdq.hw import limits_for
from kernbench.cmdq.stream import EntryStream, checked_chunks
from kernbench.errors import DeadlockError, InputError
from kernbench.host import compile_ahead
from kernbench.host.compile_ahead import ahead, entry_stream
from kernbench.host.models import ShapeOptions, resolve_model
from kernbench.host.parallel import run_parallel
from kernbench.host.run import RunHooks, RunOptions, run_model
from kernbench.topology import load_topology

CFG = Path(__file__).resolve().parents[1] / "hf_configs"


def _chunks(n: int, size: int = 3) -> Iterator[list[dict]]:
    for i in range(n):
        yield [{"id": i * size + k, "payload": "x" * (i + k)} for k in range(size)]


def _forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets an item each time a stream is compiled ahead (`ahead` called)."""
    calls: list[int] = []
    real = compile_ahead.ahead

    def spy(chunks):  # noqa: ANN001, ANN202
        calls.append(1)
        return real(chunks)

    monkeypatch.setattr(compile_ahead, "ahead", spy)
    return calls


def _gone(pid: int) -> bool:
    """The child was reaped: no process of ours has that pid any more."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _child_pid(it: Iterator) -> int:
    return it.gi_frame.f_locals["pid"]  # the generator's own variable


def test_chunks_arrive_in_order_unchanged_and_the_child_is_reaped():
    it = ahead(_chunks(50))
    got = [next(it)]
    pid = _child_pid(it)
    assert pid != os.getpid() and not _gone(pid)
    got += list(it)
    assert got == list(_chunks(50))
    assert _gone(pid)  # collected when the stream ended: no zombie left behind


def test_closing_early_kills_a_child_blocked_on_a_full_pipe():
    def endless() -> Iterator[list[dict]]:
        while True:
            yield [{"id": 0, "blob": "y" * 100_000}]

    it = ahead(endless())
    next(it)
    pid = _child_pid(it)
    it.close()  # the child is blocked writing: it must not hang the parent
    assert _gone(pid)


def test_an_input_error_in_the_child_is_raised_with_its_own_line():
    def failing() -> Iterator[list[dict]]:
        yield [{"id": 0}]
        yield [{"id": 1}]
        raise InputError("cannot lower", file="m.onnx", where="layer 'mlp.fc'",
                         field="shape")

    it = ahead(failing())
    got = [next(it), next(it)]  # what came before the failure arrives first
    assert got == [[{"id": 0}], [{"id": 1}]]
    with pytest.raises(InputError) as e:
        next(it)
    assert str(e.value) == "m.onnx: layer 'mlp.fc': field 'shape': cannot lower"
    assert e.value.exit_code == 2


def test_what_the_child_prints_reaches_the_parents_stderr_in_order(capsys):
    # (a warning is printed on sys.stderr the same way; pytest records warnings instead)
    def noisy() -> Iterator[list[dict]]:
        yield [{"id": 0}]
        print("a note from the compiler", file=sys.stderr)
        print("and one on stdout")
        yield [{"id": 1}]

    it = ahead(noisy())
    assert next(it) == [{"id": 0}]
    assert capsys.readouterr().err == ""  # not printed before the parent reads that far
    assert next(it) == [{"id": 1}]
    err = capsys.readouterr().err
    assert err == "a note from the compiler\nand one on stdout\n"


@pytest.mark.parametrize(("error", "raised", "line"), [
    (DeadlockError("the program did not reach END"), DeadlockError,
     "the program did not reach END"),
    (ValueError("bad 1 2"), RuntimeError,
     "the compiler's child process failed: ValueError: bad 1 2"),
])
def test_other_errors_come_back_as_kernbench_s_own_or_as_their_text(error, raised, line):
    def failing() -> Iterator[list[dict]]:
        raise error
        yield []  # a generator

    with pytest.raises(raised) as e:
        next(ahead(failing()))
    assert type(e.value) is raised and str(e.value) == line


def test_a_chunk_that_cannot_be_sent_is_an_error_naming_the_type():
    def odd() -> Iterator[list[dict]]:
        yield [{"id": 0, "blob": lambda: 0}]  # code: never sent

    with pytest.raises(RuntimeError, match="the compiler's child process failed: "
                                           "TypeError: cannot send a function"):
        next(ahead(odd()))


def test_a_child_that_dies_without_a_word_is_an_error_not_a_hang():
    def dying() -> Iterator[list[dict]]:
        yield [{"id": 0}]
        os.kill(os.getpid(), signal.SIGKILL)  # runs in the child
        yield [{"id": 1}]

    it = ahead(dying())
    assert next(it) == [{"id": 0}]
    with pytest.raises(RuntimeError, match=r"ended before the program did \(exit status -9\)"):
        next(it)


def _program(tmp: Path) -> tuple[list[list[dict]], int]:
    """A real streamed program's chunks (the 4-layer tiny Llama decode on all PEs)."""
    from kernbench.compiler.pipeline import load_model
    from kernbench.compiler.stream import compile_streamed
    from kernbench.topology import load_topology as lt

    res = resolve_model(CFG / "tiny-llama-4l.json", ShapeOptions(1, 1, 32), tmp)
    graph, _ = load_model(res.path, None)
    sc = compile_streamed(graph, lt("small"))
    return list(sc.chunks()), sc.entries


def test_a_bad_entry_is_refused_with_the_line_the_in_process_stream_gives(tmp_path):
    chunks, n = _program(tmp_path)
    chunks[1] = [dict(e) for e in chunks[1]]
    chunks[1][0]["id"] += 1  # out of order
    topo = load_topology("small")
    limits = limits_for(topo)
    lines = []
    for in_child, lowered_by in ((False, None), (True, None), (True, topo)):
        s = entry_stream(iter([list(c) for c in chunks]), n, {}, limits, "p.json",
                         in_child=in_child, topology=lowered_by)
        with pytest.raises(InputError) as e:
            for i in range(n):
                s[i]
        lines.append(str(e.value))
    assert lines[0] == lines[1] == lines[2]
    assert "is out of order" in lines[0] and lines[0].startswith("p.json: entry ")


def test_the_child_lowers_the_entries_the_parent_would(tmp_path):
    """With the topology, the child parses, checks and lowers; the parent's stream holds
    the Control-FSM entries, field for field those the in-process lowering makes."""
    from dataclasses import fields as dc_fields

    from kernbench.cmdq.hw import StreamedProgram
    from kernbench.cmdq.stream import streamed_program
    from kernbench.common.program import ProgramEntry

    chunks, n = _program(tmp_path)
    topo = load_topology("small")
    limits = limits_for(topo)
    progs = []
    for topology in (None, topo):
        s = entry_stream(iter([list(c) for c in chunks]), n, {}, limits, None,
                         in_child=True, topology=topology)
        assert s._lowered is (topology is not None)
        sp = StreamedProgram(streamed_program(s, {}), topo, limits, lambda _e: None)
        progs.append([sp[i] for i in range(n)])
    assert all(type(e) is ProgramEntry for e in progs[1])

    def fields(e: ProgramEntry) -> tuple:
        c = e.command
        return (e.id, e.kind, e.pe, e.deps, e.wait_for, e.label, type(c).__name__,
                None if c is None else {f.name: getattr(c, f.name) for f in dc_fields(c)})

    assert [fields(e) for e in progs[0]] == [fields(e) for e in progs[1]]


def test_checked_chunks_passes_every_entry_of_a_good_program_unchanged(tmp_path):
    chunks, n = _program(tmp_path)
    limits = limits_for(load_topology("small"))
    assert list(checked_chunks(iter(chunks), n, limits)) == chunks
    s = EntryStream(ahead(checked_chunks(iter(chunks), n, limits)), n, {}, limits,
                    checked=True)
    assert [s[i].id for i in range(n)] == list(range(n))


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def test_a_run_is_byte_identical_with_and_without_compile_ahead(tmp_path, monkeypatch):
    import kernbench.host.run as run_mod

    checked_here = []
    real = run_mod.compile_for_run

    def spy(*a, **k):  # noqa: ANN002, ANN003, ANN202
        got = real(*a, **k)
        assert isinstance(got[0].cmdq, EntryStream)  # streamed, both times
        checked_here.append(got[0].cmdq._checker is not None)
        return got

    monkeypatch.setattr(run_mod, "compile_for_run", spy)
    outs = []
    for ahead_ in (False, True):
        tmp = tmp_path / str(ahead_)
        res = resolve_model(CFG / "tiny-llama-4l.json", ShapeOptions(2, 1, 64), tmp)
        run_model(res.path, load_topology("base"), tmp / "out",
                  RunOptions(trace=False, report=False, write_cmdq=False, exact=True,
                             all_pes=True, bundle=tmp / "bundle", compile_ahead=ahead_),
                  RunHooks(note=lambda _m: None))
        outs.append(_outputs(tmp / "out"))
    assert checked_here == [True, False]  # the second was compiled and checked in a child
    assert outs[0] == outs[1]
    assert json.loads(outs[1]["stats.json"])["total_ns"] > 0


def test_a_tensor_parallel_run_is_byte_identical_with_compile_ahead(tmp_path):
    res = resolve_model(CFG / "tiny-llama-tp8.json", ShapeOptions(1, None, 16),
                        tmp_path / "model", None)
    outs = []
    for ahead_ in (False, True):
        opts = RunOptions(trace=False, report=False, write_cmdq=False, write_weights=False,
                          tp=2, compile_ahead=ahead_)
        run_parallel(res.path, load_topology("t3k"), tmp_path / str(ahead_), opts,
                     RunHooks(note=lambda _s: None))
        outs.append(_outputs(tmp_path / str(ahead_)))
    assert outs[0] == outs[1]
    assert json.loads(outs[1]["stats.json"])["parallel"]["tp"] == 2


def test_a_fork_that_fails_is_said_and_the_stream_runs_here(tmp_path, monkeypatch, capsys):
    chunks, n = _program(tmp_path)
    limits = limits_for(load_topology("small"))

    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    fds = len(os.listdir("/proc/self/fd"))
    s = entry_stream(iter(chunks), n, {}, limits, None, in_child=True)
    assert "compile ahead: no child process (Resource temporarily unavailable)" in \
        capsys.readouterr().err
    assert s._checker is not None  # checked here, as the in-process stream is
    assert [s[i].id for i in range(n)] == list(range(n))
    assert len(os.listdir("/proc/self/fd")) == fds  # the pipe was closed


def test_available_needs_fork_and_two_cpus(monkeypatch):
    monkeypatch.setattr(compile_ahead, "usable_cpus", lambda: 1)
    assert not compile_ahead.available()
    monkeypatch.setattr(compile_ahead, "usable_cpus", lambda: 2)
    assert compile_ahead.available()
    monkeypatch.delattr(os, "fork")
    assert not compile_ahead.available()


@pytest.mark.parametrize(("cpus", "flag", "forked"), [(2, (), True),
                                                     (2, ("--no-compile-ahead",), False),
                                                     (1, (), False)])
def test_kernbench_run_compiles_ahead_by_default_where_two_cpus_are(
        tmp_path, monkeypatch, cpus, flag, forked):
    from kernbench.cli import main

    calls = _forks(monkeypatch)
    monkeypatch.setattr(compile_ahead, "usable_cpus", lambda: cpus)
    out = tmp_path / "out"
    assert main(["run", str(CFG / "tiny-llama-4l.json"), "-t", "base", "--batch", "2",
                 "--kv-len", "64", "--exact", "--all-pes", "--no-report", "--quiet",
                 "--out", str(out), *flag]) == 0
    assert calls == ([1] if forked else [])
    assert json.loads((out / "stats.json").read_text())["total_ns"] > 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are Linux's")
def test_the_pipe_is_widened_as_far_as_the_os_allows():
    import fcntl

    r, w = os.pipe()
    try:
        before = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)
        compile_ahead._widen(w)
        most = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        want = min(most, compile_ahead.PIPE_BYTES)  # the kernel may round it up
        assert fcntl.fcntl(w, fcntl.F_GETPIPE_SZ) >= max(before, want) > 64 * 1024 - 1
    finally:
        os.close(r)
        os.close(w)
