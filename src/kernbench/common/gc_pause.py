"""The cyclic garbage collector paused while a whole program is compiled or simulated.

A whole-program compile builds hundreds of thousands of objects that live until it ends
(tile ops, buffers, CMDQ entries); a simulation holds the program's commands and makes
events, tokens and reservations by the million. Each collection the allocations trigger
rescans the young objects and everything they reference, and finds next to nothing to
free (the full ones rescan everything). Reference counting still frees all acyclic
garbage at once. When the block ends, what the collector tracks goes to its oldest
generation without a scan (`_to_oldest`): the first collection after the block would
otherwise scan every object the block made and still holds. The cycles made meanwhile
wait for the next full collection. Nothing computed depends on when memory is freed.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["GC_THRESHOLDS", "gc_paused", "tune_gc"]

#: the cyclic garbage collector's thresholds for a kernbench process: a compile or a
#: simulation allocates millions of small objects that live until the run ends (tile ops,
#: CMDQ entries, commands, events); with Python's default (700, 10, 10) the collector
#: rescans them over and over. Collection changes no result, only when memory is freed.
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Set `GC_THRESHOLDS` for the process (the console script, serve's and a sweep's
    worker processes do; benchmarks call it to match)."""
    gc.set_threshold(*GC_THRESHOLDS)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Collection off inside the block; back to what it was after it (nested blocks and a
    collector someone else turned off stay as they were)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            _to_oldest()
            gc.enable()


def _to_oldest() -> None:
    """Every object the collector tracks into the oldest generation, unscanned (frozen,
    then unfrozen). Else the young generation holds every object made in the block that
    is still alive, and the first collection after it scans them all (a compile's tile
    ops, buffers and entries) to free next to nothing; in the oldest generation they
    wait for a full collection, as any long-lived object does. Left alone when someone
    has frozen objects (unfreezing would release theirs too)."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
