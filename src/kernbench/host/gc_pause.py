"""The cyclic garbage collector paused while a whole program is compiled.

A whole-program compile builds hundreds of thousands of objects that live until it ends
(tile ops, buffers, CMDQ entries): each collection the allocations trigger rescans the
young ones and everything they reference, and finds next to nothing to free. Reference
counting still frees all acyclic garbage at once; the cycles made meanwhile wait for the
first collection after the compile. Nothing computed depends on when memory is freed.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


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
            gc.enable()
