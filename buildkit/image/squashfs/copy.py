"""Copying a layer's data from an earlier image: the segment a record describes, and the jobs that copy it.

A :class:`Segment` is one layer's data in one image (what a reuse record keeps); an :class:`Earlier` is such a
segment open for copying. The jobs run on the block writer's threads: :class:`Copy` checks every item of its
range against the CRC32 the record keeps, then copies the range (by itself when its place in the new image is
known, else through the writer); :class:`Refragment` unpacks a fragment block of the earlier image and packs
the files that survive again. Any mismatch raises :class:`EarlierChanged`: the conversion then starts again
without that image.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ...fs.files import copy_range, start_writeback
from .blocks import (
    ALIGNED,
    UNCOMPRESSED_BLOCK,
    Compress,
    CopyRange,
    Output,
    Packed,
    crc32,
    pack,
)

CHECK_CHUNK = 1 << 20  # per copying thread: enough to make the reads cheap, small enough to keep memory flat


class EarlierChanged(Exception):  # noqa: N818 - a signal to convert from scratch, never shown to the user
    """A copied range of an earlier image does not match its record: that image changed or is damaged."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def stored(word: int) -> int:
    """Bytes a block's size word stands for in the image (0 for a hole)."""
    return word & (UNCOMPRESSED_BLOCK - 1)


@dataclass
class Segment:
    """One layer's data in one image, as a record keeps it; positions count from the segment's start."""

    start: int = 0
    end: int = 0
    files: dict[int, tuple[int, tuple[int, ...], int]] = field(default_factory=dict)  # offset → (at, words, crc)
    # fragment group → (at, size word, crc, which of the group's members the block holds, by index)
    groups: dict[int, tuple[int, int, int, tuple[int, ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Earlier:
    """A segment of an earlier image, open for copying: ``base`` is where its squashfs starts in the file."""

    fd: int
    base: int
    segment: Segment
    path: str
    decompress: Callable[[bytes, int], bytes]
    fresh: bool = False  # compressed in this conversion, while the layer streamed in (:mod:`.precompress`)


class _Buffer(threading.local):
    """One read buffer per copying thread, made on first use: reading into it again costs no allocation and
    no page faults."""

    view: memoryview | None = None


_buffer = _Buffer()


def check(earlier: Earlier, at: int, size: int, crc: int) -> None:
    """Read ``size`` bytes at ``at`` of the earlier segment; EarlierChanged unless their CRC32 is ``crc``."""
    if _buffer.view is None:
        _buffer.view = memoryview(bytearray(CHECK_CHUNK))
    view, got, done = _buffer.view, 0, 0
    while done < size:
        n = os.preadv(earlier.fd, [view[:min(CHECK_CHUNK, size - done)]],
                      earlier.base + earlier.segment.start + at + done)
        if n <= 0:
            raise EarlierChanged(earlier.path)
        got = crc32(view[:n], got)
        done += n
    if got != crc:
        raise EarlierChanged(earlier.path)


def read_checked(earlier: Earlier, at: int, size: int, crc: int) -> bytes:
    """A (small) range of the earlier segment, checked against ``crc``."""
    data = os.pread(earlier.fd, size, earlier.base + earlier.segment.start + at)
    if len(data) != size or crc32(data) != crc:
        raise EarlierChanged(earlier.path)
    return data


class Copy:
    """A range of an earlier image: its items' CRCs are checked on a worker; the worker writes it too when its
    place in the new image is known (``dest``), else the writer copies it once the jobs before it are written."""

    __slots__ = ("earlier", "at", "fixed", "items", "out", "dest")

    def __init__(self, earlier: Earlier, at: int, out: Output) -> None:
        self.earlier, self.at, self.fixed, self.out = earlier, at, 0, out
        self.items: list[tuple[int, int, Callable[[int], None]]] = []  # (size, crc, called with its position)
        self.dest: int | None = None

    def add(self, size: int, crc: int, place: Callable[[int], None]) -> None:
        self.items.append((size, crc, place))
        self.fixed += size

    def __call__(self, compress: Compress) -> Packed:
        at = self.at
        for size, crc, _ in self.items:
            check(self.earlier, at, size, crc)
            at += size
        source = self.earlier.base + self.earlier.segment.start + self.at
        if self.dest is None:
            return [(CopyRange(self.earlier.fd, source, self.fixed), 0)]
        try:
            copy_range(self.earlier.fd, source, self.out.fd, self.out.base + self.dest, self.fixed)
        except OSError as err:
            raise EarlierChanged(self.earlier.path) from err
        if self.out.write_behind:  # on ext4 a reconversion's copied gigabytes would otherwise wait for the fsync
            start_writeback(self.out.fd, self.out.base + self.dest, self.fixed)
        return []

    def done(self, pos: int, _blocks: list[tuple[int, int]], _chunks: list[bytes]) -> None:
        for size, _, place in self.items:
            place(pos)
            pos += size


class Mark:
    """An empty job: its callback learns where the output stands at that point."""

    fixed = 0

    def __call__(self, compress: Compress) -> Packed:
        return []


class Align:
    """Zeros up to the next block boundary: every layer's data starts and ends on one, so a layer copied whole
    from an earlier image is block-aligned in both files (see :func:`buildkit.fs.files.copy_range`)."""

    fixed = -1

    def __call__(self, compress: Compress) -> Packed:
        return [(ALIGNED, 0)]


class Refragment:
    """A group of an earlier image that lost members: its block decompressed, the survivors packed again."""

    __slots__ = ("earlier", "old", "sizes", "keep")

    def __init__(self, earlier: Earlier, old: tuple[int, int, int], sizes: list[int], keep: list[int]) -> None:
        self.earlier, self.old, self.sizes, self.keep = earlier, old, sizes, keep

    def __call__(self, compress: Compress) -> Packed:
        at, word, crc = self.old
        raw = read_checked(self.earlier, at, stored(word), crc)
        total = sum(self.sizes)
        try:
            data = raw if word & UNCOMPRESSED_BLOCK else self.earlier.decompress(raw, total)
        except Exception as err:  # any codec error: the earlier image is not what its record says
            raise EarlierChanged(self.earlier.path) from err
        if len(data) != total:
            raise EarlierChanged(self.earlier.path)
        starts = list(itertools.accumulate(self.sizes, initial=0))
        return [pack(compress, b"".join(data[starts[n]:starts[n] + self.sizes[n]] for n in self.keep))]
