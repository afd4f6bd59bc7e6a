"""Writing a squashfs image's data blocks in order while a pool of threads reads and compresses them.

Workers do the reading too (zstd, zlib and lzma release the GIL, so every CPU works), so the main thread only
plans; blocks are written in submission order as jobs come back, so memory stays bounded by the backlog
whatever the image size, and the output never depends on thread timing. A job may also hand back a range of
an earlier image, which is copied file to file (``copy_file_range``: in the kernel, or shared extents on
filesystems that support them).
"""

from __future__ import annotations

import os
import threading
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import ConvertError

try:
    from isal.isal_zlib import crc32  # about ten times zlib's speed
except ImportError:  # no isal wheel for this platform
    crc32 = zlib.crc32

BLOCK_SIZE = 1 << 17
UNCOMPRESSED_BLOCK = 1 << 24  # flag in a data block's or fragment's size word

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


class Output:
    """The image file, written sequentially through its descriptor (so copies and writes interleave)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: bytes | memoryview) -> int:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        return len(data)

    def copy(self, source: CopyRange) -> None:
        offset, left = source.offset, source.size
        while left:
            try:
                n = os.copy_file_range(source.fd, self.fd, left, offset)
            except OSError:  # not supported between these files: copy through memory
                n = self.write(os.pread(source.fd, min(left, 8 << 20), offset))
            if n <= 0:
                raise ConvertError("an earlier image ended early while it was copied")
            offset, left = offset + n, left - n


class _Local(threading.local):
    compress: Compress | None = None


class BlockWriter:
    """Runs block jobs (read + compress) on a thread pool and writes their output in submission order.

    ``submit`` returns at once unless the backlog is full. Each job's callback receives where its output starts,
    the (position, size word) of every block it wrote and the bytes written (for checksums)."""

    def __init__(self, out: Output, start: int, make: Callable[[], Compress], jobs: int) -> None:
        self.out, self.pos = out, start
        self._make, self._local = make, _Local()
        self._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="squashfs")
        self._pending: deque[tuple[Future[Packed], Done]] = deque()
        self._backlog = 2 * jobs + 4  # finished runs waiting to be written: memory stays a few MiB per thread

    def _work(self, job: Callable[[Compress], Packed]) -> Packed:
        compress = self._local.compress
        if compress is None:
            compress = self._local.compress = self._make()
        return job(compress)

    def submit(self, job: Callable[[Compress], Packed], done: Done) -> None:
        self._pending.append((self._pool.submit(self._work, job), done))
        while len(self._pending) > self._backlog:
            self._retire()

    def _retire(self) -> None:
        future, done = self._pending.popleft()
        start = self.pos
        placed, chunks = [], []
        for data, word in future.result():
            placed.append((self.pos, word))
            if isinstance(data, CopyRange):
                self.out.copy(data)
                self.pos += data.size
            elif word:
                self.out.write(data)
                self.pos += len(data)
                chunks.append(data)  # type: ignore[arg-type]
        done(start, placed, chunks)

    def drain(self) -> None:
        while self._pending:
            self._retire()

    def close(self) -> None:
        for future, _ in self._pending:
            future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True)
