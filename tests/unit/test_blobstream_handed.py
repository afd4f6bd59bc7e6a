"""A downloaded piece lets go of each part once it is handed on (memory: a piece is 4 MiB, and the first piece
of every blob was held until its blob ended)."""

from __future__ import annotations

import sys

from buildkit.registry.distribution.blobstream import _handed


def test_a_piece_holds_no_part_it_has_handed_on() -> None:
    parts = [bytes([n]) * 100_000 for n in range(4)]  # distinct objects the test keeps a reference to
    first, last = parts[0], parts[-1]
    held_first, held_last = sys.getrefcount(first), sys.getrefcount(last)
    handed = _handed(list(parts))
    del parts
    got = next(handed)
    assert got is first
    del got
    assert sys.getrefcount(first) == held_first - 1  # only the test holds it now, not the piece
    assert sys.getrefcount(last) == held_last  # still in the piece, waiting its turn
    assert [p[0] for p in handed] == [1, 2, 3]
    assert sys.getrefcount(last) == held_last - 1
