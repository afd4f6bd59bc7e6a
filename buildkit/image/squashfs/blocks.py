"""Writing a squashfs image's data blocks in order while a pool of threads reads and compresses them.

Workers do the reading too (zstd, zlib and lzma release the GIL, so every CPU works), so the main thread only
plans; blocks are written in submission order as jobs come back, so memory stays bounded by the backlog
whatever the image size, and the output never depends on thread timing. A job may also hand back a range of
an earlier image, which is copied file to file (``copy_file_range``: in the kernel, or shared extents on
filesystems that support them). An output that is the artifact itself is sent to the disk as it is written and
copied (write-behind: :func:`buildkit.fs.files.start_writeback`), so the fsync before it is published finds little
left to write.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ...errors import ConvertError
from ...fs.files import ALIGN, copy_range, start_writeback

try:
    from isal.isal_zlib import crc32  # about ten times zlib's speed
except ImportError:  # no isal wheel for this platform
    crc32 = zlib.crc32

BLOCK_SIZE = 1 << 17
UNCOMPRESSED_BLOCK = 1 << 24  # flag in a data block's or fragment's size word
WRITE_BEHIND = 32 << 20  # bytes the writer writes between two write-behind calls

Compress = Callable[[bytes], bytes]
Piece = tuple[int, int, int] | bytes  # (fd, offset, size) of a layer file, or bytes held in memory


@dataclass(frozen=True)
class CopyRange:
    """``size`` bytes at ``offset`` of the open file ``fd``, to be copied into the image as they are."""

    fd: int
    offset: int
    size: int


# (what to write, size word) per block; word 0 is a hole: nothing written
Packed = list[tuple[bytes | memoryview | CopyRange, int]]
Done = Callable[[int, list[tuple[int, int]], list[bytes]], None]  # (job's start, (position, word) per block, data)


def read_piece(piece: Piece, what: str) -> bytes:
    if isinstance(piece, bytes):
        return piece
    fd, offset, size = piece
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise ConvertError(f"{what}: the layer ended early (truncated or changed while it was read)")
    return data


def pack(compress: Compress, data: bytes | memoryview) -> tuple[bytes | memoryview, int]:
    """A block compressed, or stored as it is (with the flag set) when compressing does not shrink it."""
    packed = compress(data)  # type: ignore[arg-type]
    return (packed, len(packed)) if len(packed) < len(data) else (data, len(data) | UNCOMPRESSED_BLOCK)


class Run:
    """Consecutive blocks of one file, read at once, hole-checked and compressed on a worker thread."""

    __slots__ = ("piece", "what")

    def __init__(self, piece: Piece, what: str) -> None:
        self.piece, self.what = piece, what

    def __call__(self, compress: Compress) -> Packed:
        data = memoryview(read_piece(self.piece, self.what))
        blocks = (data[at:at + BLOCK_SIZE] for at in range(0, len(data), BLOCK_SIZE))
        # an all-zero block is a hole (size word 0), as mksquashfs writes it
        return [(b"", 0) if _is_hole(block) else pack(compress, block) for block in blocks]


def _is_hole(block: memoryview) -> bool:
    return block[0] == 0 and block[-1] == 0 and bytes(block) == bytes(len(block))


class Fragment:
    """One fragment block: the small files packed into it, read and compressed on a worker thread."""

    __slots__ = ("pieces", "what")

    def __init__(self, pieces: list[Piece], what: str) -> None:
        self.pieces, self.what = pieces, what

    def __call__(self, compress: Compress) -> Packed:
        return [pack(compress, b"".join(read_piece(piece, self.what) for piece in self.pieces))]


ALIGNED = CopyRange(-1, 0, 0)  # a job's output: nothing, then up to the next block boundary


class Output:
    """The image file, written by position: the writer appends at ``pos``, and a copy job whose place is known
    in advance writes there itself, on a worker, while other jobs run. Positions are the image's own; the image
    starts at ``base`` of the file (a SIF's partition is written where it will stay, not copied there later)."""

    def __init__(self, fd: int, pos: int = 0, write_behind: bool = False, base: int = 0) -> None:
        self.fd, self.pos, self.base = fd, pos, base
        self.write_behind = write_behind  # the file is to be fsynced: send what is written to disk as it goes

    def write(self, data: bytes | memoryview) -> int:
        self.write_at(self.pos, data)
        self.pos += len(data)
        return len(data)

    def write_at(self, pos: int, data: bytes | memoryview) -> None:
        view, pos = memoryview(data), self.base + pos
        while view:
            n = os.pwrite(self.fd, view, pos)
            view, pos = view[n:], pos + n

    def copy(self, source: CopyRange) -> None:
        copy_range(source.fd, source.offset, self.fd, self.base + self.pos, source.size)
        self.pos += source.size


class _Local(threading.local):
    compress: Compress | None = None


class BlockWriter:
    """Runs block jobs (read + compress) on a thread pool and writes their output in submission order.

    ``submit`` returns at once unless the backlog is full. Each job's callback receives where its output starts,
    the (position, size word) of every block it wrote and the bytes written (for checksums).

    A job with a ``fixed`` output size (a copy, an alignment, a mark) submitted while every job before it has
    one too is *placed* at once: it learns its position (``dest``), its callback runs right away, and a copy
    runs on a separate pool of I/O threads and writes its output itself. So the metadata tables can be built
    while the copies still run; :meth:`finish` waits for them."""

    def __init__(self, out: Output, make: Callable[[], Compress], jobs: int) -> None:
        self.out = out
        self._make, self._local = make, _Local()
        self._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="squashfs")
        self._io = ThreadPoolExecutor(max_workers=2, thread_name_prefix="squashfs-copy")
        self._pending: deque[tuple[Future[Packed], Done]] = deque()
        self._placed: list[Future[Packed]] = []
        self._backlog = 2 * jobs + 4  # finished runs waiting to be written: memory stays a few MiB per thread
        self._known: int | None = out.pos  # where the next job's output starts, while every size is known
        self._behind = out.pos  # what the writer wrote before this is on its way to the disk (write-behind)

    @property
    def pos(self) -> int:
        return self.out.pos

    def _work(self, job: Callable[[Compress], Packed]) -> Packed:
        compress = self._local.compress
        if compress is None:
            compress = self._local.compress = self._make()
        return job(compress)

    def submit(self, job: Callable[[Compress], Packed], done: Done) -> None:
        """Queue ``job`` (or place it at once, see the class)."""
        fixed = getattr(job, "fixed", None)
        if fixed is not None and self._known is not None:
            size = fixed if fixed >= 0 else -self._known % ALIGN
            job.dest = self._known  # type: ignore[attr-defined]
            if fixed > 0:
                self._placed.append(self._io.submit(self._work, job))
            done(self._known, [(self._known, 0)] if fixed > 0 else [], [])
            self._known += size
            self.out.pos = self._known
            return
        self._known = None
        self._pending.append((self._pool.submit(self._work, job), done))
        while len(self._pending) > self._backlog:
            self._retire()

    def _retire(self) -> None:
        future, done = self._pending.popleft()
        start = self.out.pos
        placed: list[tuple[int, int]] = []
        chunks: list[bytes] = []
        for data, word in future.result():
            placed.append((self.out.pos, word))
            if data is ALIGNED:  # a hole up to the next block boundary: it reads as zeros
                self.out.pos += -self.out.pos % ALIGN
            elif isinstance(data, CopyRange):
                self.out.copy(data)
            elif word:
                self.out.write(data)
                chunks.append(data)  # type: ignore[arg-type]
        done(start, placed, chunks)
        if self.out.write_behind and self.out.pos - self._behind >= WRITE_BEHIND:  # off the main thread: it may block
            self._io.submit(start_writeback, self.out.fd, self.out.base + self._behind,
                            self.out.pos - self._behind)
            self._behind = self.out.pos

    def drain(self) -> None:
        """Write every queued job's output (placed copies may still run: see :meth:`finish`)."""
        while self._pending:
            self._retire()

    def finish(self) -> None:
        """Wait for the placed copies; the first failure is raised."""
        while self._placed:
            self._placed.pop(0).result()

    def close(self) -> None:
        for future in [*(f for f, _ in self._pending), *self._placed]:
            future.cancel()
        self._pending.clear()
        self._placed.clear()
        self._pool.shutdown(wait=True)
        self._io.shutdown(wait=True)
