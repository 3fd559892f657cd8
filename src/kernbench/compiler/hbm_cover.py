"""Which bytes of an HBM access later writes have covered (what lets the schedule forget it).

An access is a range (first byte, hull end, row stride, row bytes) of one storage. The
schedule keeps it while a later op could still have to wait for it; once later writes
(each of which waited for it) hold all its bytes, whoever touches those bytes waits for
those writes, and the access can go. `Access.cover` tracks this exactly where the geometry
is simple and conservatively (keeps the access) where it is not:

- the bytes left are rectangles (rows × columns) in a frame of one row pitch: the
  access's own stride, or for a contiguous access the pitch of the first strided write
  that reaches into it;
- a write maps into that frame if it is contiguous (up to three rectangles: a partial
  first row, whole rows, a partial last row) or strided with the frame's pitch (one or
  two rectangles: its columns may wrap past the pitch); any other write removes nothing.
"""

from __future__ import annotations

Rect = tuple[int, int, int, int]  # rows [r0, r1) × columns [c0, c1)

#: an access cut into more pieces than this keeps them and is no longer refined
MAX_PIECES = 64


def _dense(rng: tuple) -> bool:
    lo, hi, st, rb = rng
    return rb >= st or hi - lo <= rb


def covers(w: tuple, e: tuple) -> bool:
    """Does range `w` hold every byte of range `e`? (The common case, in O(1); False when
    unsure.)"""
    lo1, hi1, st1, rb1 = w
    lo2, hi2, st2, rb2 = e
    if not (lo1 <= lo2 and hi2 <= hi1):
        return False
    if rb1 >= st1:  # w is dense: its hull is every byte
        return True
    d = (lo2 - lo1) % st1  # where e starts within a row of w
    if hi2 - lo2 <= rb2:  # e is one run of bytes: inside one row of w
        return d + (hi2 - lo2) <= rb1
    if st1 == st2 and rb2 <= st2:  # same pitch: e's columns inside w's on every row
        return d + rb2 <= rb1
    return False


def rects(rng: tuple, pitch: int, origin: int) -> list[Rect] | None:
    """The bytes of `rng` as rectangles of rows of `pitch` bytes counted from `origin`;
    None when `rng` is strided with another pitch."""
    lo, hi, st, rb = rng
    if _dense(rng):
        x0, x1 = lo - origin, hi - origin
        rs, cs = divmod(x0, pitch)
        re, ce = divmod(x1, pitch)
        if rs == re:
            return [(rs, rs + 1, cs, ce)] if ce > cs else []
        out = [(rs, rs + 1, cs, pitch)] if cs else []
        full0 = rs + 1 if cs else rs
        if re > full0:
            out.append((full0, re, 0, pitch))
        if ce:
            out.append((re, re + 1, 0, ce))
        return out
    if st != pitch:
        return None
    rows = (hi - lo - rb) // st + 1
    r, c = divmod(lo - origin, pitch)
    if c + rb <= pitch:
        return [(r, r + rows, c, c + rb)]
    return [(r, r + rows, c, pitch), (r + 1, r + 1 + rows, 0, c + rb - pitch)]


def minus(a: Rect, b: Rect) -> list[Rect]:
    """Rectangle `a` without rectangle `b` (at most four pieces)."""
    ar0, ar1, ac0, ac1 = a
    br0, br1, bc0, bc1 = b
    if br0 >= ar1 or ar0 >= br1 or bc0 >= ac1 or ac0 >= bc1:
        return [a]
    out = []
    if ar0 < br0:
        out.append((ar0, br0, ac0, ac1))
    if br1 < ar1:
        out.append((br1, ar1, ac0, ac1))
    r0, r1 = max(ar0, br0), min(ar1, br1)
    if ac0 < bc0:
        out.append((r0, r1, ac0, bc0))
    if bc1 < ac1:
        out.append((r0, r1, bc1, ac1))
    return out


class Access:
    """One op's access to a storage (`rng`, op `idx`) and its bytes not yet overwritten."""

    __slots__ = ("idx", "left", "pitch", "rng")

    def __init__(self, rng: tuple, idx: int) -> None:
        self.rng = rng
        self.idx = idx
        self.pitch = 0                   # 0: every byte is left (nothing cut yet)
        self.left: list[Rect] = []

    def cover(self, w: tuple) -> bool:
        """Remove the bytes write range `w` holds (the caller made that write wait for
        this access); True when no byte is left."""
        if covers(w, self.rng):
            return True
        if not self.pitch:
            lo, hi, st, _ = self.rng
            pitch = (st if not _dense(self.rng) else w[2] if not _dense(w) else hi - lo)
            left = rects(self.rng, pitch, lo)
            if left is None or pitch <= 0:
                return False
            self.pitch, self.left = pitch, left
        if len(self.left) > MAX_PIECES:
            return False
        cut = rects(w, self.pitch, self.rng[0])
        if cut is None:
            return False
        for b in cut:
            self.left = [p for a in self.left for p in minus(a, b)]
        return not self.left


__all__ = ["Access", "covers", "minus", "rects"]
