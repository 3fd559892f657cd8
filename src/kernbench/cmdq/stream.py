"""A CMDQ program whose entries arrive while it runs (a compiler producing them layer by
layer, `compiler.stream`), standing in for `CmdqProgram.cmdq`.

`EntryStream` is a sequence of `n` entries: reading entry i pulls decoded chunks from the
source until entry i exists, parses them (the same strict models as `load_program`) and
checks each entry as `check_program` would (`validate.EntryChecker`); assigning None to
entry i forgets it (what `StreamedProgram` does with `consume` once an entry is built). The
Control FSM reads entries in order within its window, so host memory holds the window and
the chunk being read, not the program. A source that ends early or runs on is a compiler
bug (RuntimeError).

A stream that knows in advance which chip each entry runs on (`pes`: a merged
multi-chip program whose layout is fixed, `compiler.parallel.lockstep`) says so through
`entry_pes`, so that the simulator splits it over the chips' command processors.

A stream built with `checked=True` parses its entries but leaves the checks to its source,
which must have run them (`checked_chunks`, in a child process: `host.compile_ahead`).
One built with `lowered=True` as well receives its entries parsed, checked and lowered to
Control-FSM entries by its source (`cmdq.hw.lowered_chunks`, in that child) and holds them
as they are: `StreamedProgram` takes them without parsing or lowering anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

from kernbench.cmdq.io import parse_chunk
from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.schema import CmdqMetadata, CmdqProgram, EntryBase
from kernbench.cmdq.validate import EntryChecker


class EntryStream(Sequence[EntryBase]):
    """The entries of a streamed program (module docstring). `layer_entries`: entries per
    layer id, known in advance (progress, per-layer spans). `pes` (optional) gives every
    entry's PE for the chip split before the entries exist (`entry_pes`)."""

    def __init__(self, chunks: Iterator[list[dict[str, Any]]], n: int,
                 layer_entries: Mapping[str, int], limits: CmdqLimits,
                 file: str | None = None,
                 pes: Callable[[], list[int | str]] | None = None,
                 checked: bool = False, lowered: bool = False) -> None:
        self._chunks = chunks
        self._pes = pes
        self._n = n
        self.layer_entries = dict(layer_entries)
        self._file = file
        if lowered and not checked:
            raise ValueError("a stream of lowered entries is checked by its source")
        self._checker = None if checked else EntryChecker(n, limits, file)
        self._lowered = lowered
        self._models: dict[int, EntryBase] = {}
        self._next = 0  # entries parsed so far

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> EntryBase: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[EntryBase]: ...

    def __getitem__(self, i: int | slice) -> EntryBase | Sequence[EntryBase]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if not 0 <= i < self._n:
            raise IndexError(f"entry {i} of a {self._n}-entry program")
        while i >= self._next:
            self._pull()
        e = self._models.get(i)
        if e is None:
            raise IndexError(f"entry {i} was already consumed")
        return e

    def __setitem__(self, i: int, value: None) -> None:
        if value is not None:
            raise TypeError("a streamed program's entries can only be forgotten (None)")
        self._models.pop(i, None)

    def entry_pes(self) -> list[int | str] | None:
        """Each entry's PE index as far as the chip split reads it (an index of a PE of
        the entry's chip; "barrier", "nop", "end" for control entries), from the `pes`
        the stream was given; None without it (the entries cannot be read ahead)."""
        return self._pes() if self._pes is not None else None

    def __iter__(self) -> Iterator[EntryBase]:
        raise TypeError("a streamed program is read by index, in order (it is produced as "
                        "it is read)")

    def _pull(self) -> None:
        chunk = next(self._chunks, None)
        if chunk is None:
            raise RuntimeError(f"program stream ended after {self._next} of {self._n} entries")
        first = self._next
        if first + len(chunk) > self._n:
            raise RuntimeError(f"program stream runs past its {self._n} entries")
        models = self._models
        if self._lowered:  # ProgramEntry objects, checked and lowered by the source
            for k, e in enumerate(chunk, first):
                models[k] = e
        else:
            checker = self._checker
            for k, e in enumerate(parse_chunk(chunk, first, file=self._file), first):
                if checker is not None:
                    checker.check(k, e)
                models[k] = e
        self._next = first + len(chunk)
        if self._next == self._n:  # the source is done: let it release what it holds
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()


def checked_chunks(chunks: Iterator[list[dict[str, Any]]], n: int, limits: CmdqLimits,
                   file: str | None = None) -> Iterator[list[dict[str, Any]]]:
    """`chunks` as they are, each entry first parsed and checked as `EntryStream` does it
    (the first problem raised where its chunk would be read). For a source that runs in
    another process (`host.compile_ahead`): the checks run there, and the stream that
    reads the result is built with `checked=True`."""
    checker = EntryChecker(n, limits, file)
    first = 0
    for chunk in chunks:
        for k, e in enumerate(parse_chunk(chunk, first, file=file), first):
            checker.check(k, e)
        first += len(chunk)
        yield chunk


def streamed_program(stream: EntryStream, metadata: Mapping[str, Any]) -> CmdqProgram:
    """A CmdqProgram whose `cmdq` is `stream` (the model is built without validating the
    entries, which the stream checks as they arrive)."""
    return CmdqProgram.model_construct(cmdq=stream, metadata=CmdqMetadata(**metadata))


__all__ = ["EntryStream", "checked_chunks", "streamed_program"]
