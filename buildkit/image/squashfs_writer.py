"""Write a squashfs 4.0 image straight from the merged tree: no tar stream, no subprocess, nothing on disk
but the image.

File data is read from the layers' byte ranges and cut into 128 KiB blocks that a pool of threads
compresses (zstd, zlib and lzma release the GIL, so every CPU works); blocks are written in order as they
come back, so memory stays bounded by the backlog whatever the image size. Files smaller than a block are
packed into shared fragment blocks, as ``mksquashfs`` does by default. The tables (:mod:`.squashfs_tables`:
inodes, directories, fragments, export, ids, xattrs) are built once all data is written, in the order the
kernel's and ``unsquashfs``'s sanity checks expect: inodes < directories < fragment table < export table <
id table < xattrs, each table's index right after its metadata blocks.

Layout and field meanings follow the kernel's ``fs/squashfs/squashfs_fs.h``. Every block or metadata block
that does not shrink is stored uncompressed with its flag set (readers then copy it), so no reader is
ever handed a "compressed" block larger than its content. The output depends only on the tree and the
options, never on thread timing: the same input gives the same bytes.
"""

from __future__ import annotations

import functools
import logging
import lzma
import os
import struct
import threading
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import ConvertError
from .flatten import Inode, Tree
from .squashfs_tables import Compress, Ownership, Tables, lookup_table

log = logging.getLogger("ckit.squashfs")

BLOCK_SIZE = 1 << 17
BLOCK_LOG = 17
UNCOMPRESSED_BLOCK = 1 << 24  # flag in a data block's or fragment's size word
NO_FRAGMENT = 0xFFFFFFFF
NO_TABLE = 0xFFFFFFFFFFFFFFFF
FLAG_EXPORTABLE = 0x0080
FLAG_NO_XATTRS = 0x0200
COMPRESSOR_IDS = {"gzip": 1, "xz": 4, "zstd": 6}
PROGRESS_STEP = 4 << 20
ZERO_BLOCK = bytes(BLOCK_SIZE)


def compressor(algo: str, level: int) -> Callable[[], Compress]:
    """A factory of one-thread compressors for ``algo`` (squashfs's gzip is a zlib stream; xz uses a
    dictionary of one block, what the kernel's decoder assumes without compressor options)."""
    if algo == "zstd":
        import zstandard

        return lambda: zstandard.ZstdCompressor(level=level).compress
    if algo == "gzip":
        return lambda: (lambda data: zlib.compress(data, level))
    if algo == "xz":
        filters = [{"id": lzma.FILTER_LZMA2, "preset": level, "dict_size": BLOCK_SIZE}]
        return lambda: (lambda data: lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32,
                                                   filters=filters))
    raise ConvertError(f"ckit does not write {algo} squashfs", hint="use zstd, gzip or xz")


class _Local(threading.local):
    compress: Compress | None = None


Piece = tuple[int, int, int] | bytes  # (fd, offset, size) of a layer file, or bytes held in memory
Packed = list[tuple[bytes | memoryview, int]]  # (bytes to write, size word); word 0 is a hole: nothing written


def _read(piece: Piece, what: str) -> bytes:
    if isinstance(piece, bytes):
        return piece
    fd, offset, size = piece
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise ConvertError(f"{what}: the layer ended early (truncated or changed while it was read)")
    return data


def _pack(compress: Compress, data: bytes | memoryview) -> tuple[bytes | memoryview, int]:
    packed = compress(data)
    return (packed, len(packed)) if len(packed) < len(data) else (data, len(data) | UNCOMPRESSED_BLOCK)


def _is_hole(block: memoryview) -> bool:
    return block[0] == 0 and block[-1] == 0 and bytes(block) == ZERO_BLOCK[:len(block)]


class _Run:
    """Consecutive blocks of one file, read at once, hole-checked and compressed on a worker thread."""

    __slots__ = ("piece", "what")

    def __init__(self, piece: Piece, what: str) -> None:
        self.piece, self.what = piece, what

    def __call__(self, compress: Compress) -> Packed:
        data = memoryview(_read(self.piece, self.what))
        blocks = (data[at:at + BLOCK_SIZE] for at in range(0, len(data), BLOCK_SIZE))
        # an all-zero block is a hole (size word 0), as mksquashfs writes it
        return [(b"", 0) if _is_hole(block) else _pack(compress, block) for block in blocks]


class _Fragment:
    """One fragment block: the small files packed into it, read and compressed on a worker thread."""

    __slots__ = ("pieces", "what")

    def __init__(self, pieces: list[Piece], what: str) -> None:
        self.pieces, self.what = pieces, what

    def __call__(self, compress: Compress) -> Packed:
        return [_pack(compress, b"".join(_read(piece, self.what) for piece in self.pieces))]


class BlockWriter:
    """Runs block jobs (read + compress) on a thread pool and writes their output in submission order.

    Workers do the reading too, so the main thread only plans; ``submit`` returns at once unless the backlog
    is full. Each job's callback receives the (position, size word) of every block it wrote."""

    def __init__(self, out: BinaryIO, start: int, make: Callable[[], Compress], jobs: int) -> None:
        self.out, self.pos = out, start
        self._make, self._local = make, _Local()
        self._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="squashfs")
        self._pending: deque[tuple[Future[Packed], Callable[[list[tuple[int, int]]], None]]] = deque()
        self._backlog = 2 * jobs + 4  # finished runs waiting to be written: memory stays a few MiB per thread

    def _work(self, job: Callable[[Compress], Packed]) -> Packed:
        compress = self._local.compress
        if compress is None:
            compress = self._local.compress = self._make()
        return job(compress)

    def submit(self, job: Callable[[Compress], Packed], done: Callable[[list[tuple[int, int]]], None]) -> None:
        self._pending.append((self._pool.submit(self._work, job), done))
        while len(self._pending) > self._backlog:
            self._retire()

    def _retire(self) -> None:
        future, done = self._pending.popleft()
        placed = []
        for data, word in future.result():
            placed.append((self.pos, word))
            if word:
                self.out.write(data)
                self.pos += len(data)
        done(placed)

    def drain(self) -> None:
        while self._pending:
            self._retire()

    def close(self) -> None:
        for future, _ in self._pending:
            future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True)


@dataclass(slots=True)
class Placement:
    """Where a regular file's data landed."""

    size: int
    start: int = 0
    started: bool = False
    sparse: int = 0  # bytes of all-zero blocks, stored as holes
    blocks: list[int] = field(default_factory=list)
    fragment: int = NO_FRAGMENT
    fragment_offset: int = 0

    def placed(self, first: int, blocks: list[tuple[int, int]]) -> None:
        """Record blocks ``first``… once written; the first block actually written is where the file starts."""
        for n, (pos, word) in enumerate(blocks, first):
            if word == 0:
                self.sparse += min(BLOCK_SIZE, self.size - n * BLOCK_SIZE)
            elif not self.started:
                self.start, self.started = pos, True
            self.blocks[n] = word


@dataclass(frozen=True)
class Stats:
    inodes: int
    data_bytes: int
    bytes_used: int


RUN_BLOCKS = 8  # blocks per worker job: 1 MiB, few enough handoffs between threads
MAX_JOBS = 32  # threads by default: a big login node's cores are shared, and memory grows with each


class _Data:
    """Plans every regular file's data: whole blocks in runs, small files packed into fragment blocks.

    The plan needs only sizes (known from the headers); reading and compressing happen on the workers."""

    def __init__(self, tree: Tree, blocks: BlockWriter, progress: Callable[[int], None] | None) -> None:
        self.tree, self.blocks, self.progress = tree, blocks, progress
        self.fragment_entries: list[tuple[int, int]] = []
        self._frag: list[Piece] = []
        self._frag_size = 0
        self._frag_what = ""
        self._reported = self._total = 0
        self._fds: dict[int, int] = {}

    def write_all(self) -> dict[int, Placement]:
        placements: dict[int, Placement] = {}
        for inode in self.tree.inodes():
            placements[id(inode)] = self._plan_file(inode)
        self._flush_fragment()
        self.blocks.drain()
        if self.progress and self._total > self._reported:
            self.progress(self._total - self._reported)
        return placements

    def close(self) -> None:
        """Close the layer files (only once no worker can still be reading them)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def _piece(self, inode: Inode, offset: int, size: int) -> Piece:
        if inode.data is not None:
            return inode.data[offset:offset + size]
        layer = self.tree.layers[inode.layer]
        fd = self._fds.get(inode.layer)
        if fd is None:
            fd = self._fds[inode.layer] = os.open(layer.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return fd, layer.offset + inode.offset + offset, size

    def _what(self, inode: Inode) -> str:
        return self.tree.layers[inode.layer].what if inode.data is None else "rootfs additions"

    def _plan_file(self, inode: Inode) -> Placement:
        place = Placement(inode.size)
        size = inode.size
        if 0 < size < BLOCK_SIZE:
            if self._frag_size + size > BLOCK_SIZE:
                self._flush_fragment()
            place.fragment, place.fragment_offset = len(self.fragment_entries), self._frag_size
            self._frag.append(self._piece(inode, 0, size))
            self._frag_size += size
            self._frag_what = self._what(inode)
        elif size:
            count = -(-size // BLOCK_SIZE)
            place.blocks = [0] * count
            what = self._what(inode)
            for first in range(0, count, RUN_BLOCKS):
                at = first * BLOCK_SIZE
                piece = self._piece(inode, at, min(RUN_BLOCKS * BLOCK_SIZE, size - at))
                self.blocks.submit(_Run(piece, what), functools.partial(place.placed, first))
        self._total += size
        if self.progress and self._total - self._reported >= PROGRESS_STEP:
            self.progress(self._total - self._reported)
            self._reported = self._total
        return place

    def _flush_fragment(self) -> None:
        if not self._frag:
            return
        index = len(self.fragment_entries)
        self.fragment_entries.append((0, 0))

        def done(placed: list[tuple[int, int]]) -> None:
            self.fragment_entries[index] = placed[0]

        self.blocks.submit(_Fragment(self._frag, self._frag_what), done)
        self._frag, self._frag_size = [], 0


def write(tree: Tree, path: Path, algo: str, level: int, *, own: Ownership | None = None,
          mkfs_time: int = 0, jobs: int | None = None, progress: Callable[[int], None] | None = None) -> Stats:
    """Write ``tree`` as a squashfs image at ``path`` (created or truncated)."""
    make = compressor(algo, level)
    compress = make()
    with path.open("wb") as out:
        out.write(bytes(96))  # the superblock, written last
        blocks = BlockWriter(out, 96, make, jobs or min(os.cpu_count() or 1, MAX_JOBS))
        data = _Data(tree, blocks, progress)
        try:
            placements = data.write_all()
        finally:
            blocks.close()  # waits for the workers
            data.close()
        pos = blocks.pos
        tables = Tables(tree, own or Ownership(), placements, compress)
        root = tables.write()
        if tables.xattrs.dropped:
            log.info("xattrs squashfs cannot hold, dropped: %s", ", ".join(sorted(tables.xattrs.dropped)))
        inode_table = pos
        inodes = tables.inodes.finish()
        out.write(inodes)
        directory_table = pos = pos + len(inodes)
        dirs = tables.dirs.finish()
        out.write(dirs)
        pos += len(dirs)
        fragment_table, pos = lookup_table(out, pos, b"".join(
            struct.pack("<QII", start, word, 0) for start, word in data.fragment_entries), compress)
        export_table, pos = lookup_table(out, pos, struct.pack(f"<{len(tables.refs)}Q", *tables.refs), compress)
        id_table, pos = lookup_table(out, pos, struct.pack(f"<{len(tables.ids.index)}I", *tables.ids.index), compress)
        xattr_table, flags = NO_TABLE, FLAG_EXPORTABLE
        if tables.xattrs.ids:
            xattr_table, pos = tables.xattrs.write_tables(out, pos, compress)
        else:
            flags |= FLAG_NO_XATTRS
        bytes_used = pos
        out.write(bytes(-pos % 4096))
        out.seek(0)
        out.write(b"hsqs" + struct.pack(
            "<IIIIHHHHHHQQQQQQQQ", tables.count, mkfs_time, BLOCK_SIZE, len(data.fragment_entries),
            COMPRESSOR_IDS[algo], BLOCK_LOG, flags, len(tables.ids.index), 4, 0, root, bytes_used, id_table,
            xattr_table, inode_table, directory_table, fragment_table, export_table))
    return Stats(tables.count, sum(p.size for p in placements.values()), bytes_used)
