"""Write a squashfs 4.0 image straight from the merged tree: no tar stream, no subprocess, nothing on disk
but the image.

File data is read from the layers' byte ranges and cut into 128 KiB blocks that a pool of threads
compresses (zstd, zlib and lzma release the GIL, so every CPU works); blocks are written in order as they
come back, so memory stays bounded by the backlog whatever the image size. Files smaller than a block are
packed into shared fragment blocks, as ``mksquashfs`` does by default. The tables (inodes, directories,
fragments, export, ids, xattrs) are built once all data is written, in the order the kernel's and
``unsquashfs``'s sanity checks expect: inodes < directories < fragment table < export table < id table <
xattrs, each table's index right after its metadata blocks.

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
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import ConvertError
from .flatten import Inode, Meta, Node, Tree

log = logging.getLogger("ckit.squashfs")

BLOCK_SIZE = 1 << 17
BLOCK_LOG = 17
METADATA_SIZE = 8192
UNCOMPRESSED_BLOCK = 1 << 24  # flag in a data block's or fragment's size word
UNCOMPRESSED_META = 0x8000  # flag in a metadata block's 16-bit header
NO_FRAGMENT = 0xFFFFFFFF
NO_XATTR = 0xFFFFFFFF
NO_TABLE = 0xFFFFFFFFFFFFFFFF
FLAG_EXPORTABLE = 0x0080
FLAG_NO_XATTRS = 0x0200
COMPRESSOR_IDS = {"gzip": 1, "xz": 4, "zstd": 6}
DIR_ENTRIES_PER_HEADER = 256
PROGRESS_STEP = 4 << 20
ZERO_BLOCK = bytes(BLOCK_SIZE)
XATTR_PREFIXES = {"user.": 0, "trusted.": 1, "security.": 2}
# basic inode types; the extended variant of each is +7
DIR, FILE, SYMLINK, FIFO = 1, 2, 3, 6
EXTENDED = 7

Compress = Callable[[bytes], bytes]


@dataclass(frozen=True)
class Ownership:
    """How the image rewrites ownership and modes: ``all_root`` like ``mksquashfs -all-root``,
    ``fixperms`` like Enroot's ``chmod -R u+rX`` plus ``u+w`` on directories up to depth 15."""

    all_root: bool = False
    fixperms: bool = False

    def mode(self, kind: str, mode: int, depth: int) -> int:
        if self.fixperms:
            mode |= 0o400
            if kind == "dir" or mode & 0o111:
                mode |= 0o100
            if kind == "dir" and depth <= 15:
                mode |= 0o200
        return mode


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


class MetadataWriter:
    """A metadata stream (inode table, directory table, …): 8 KiB blocks behind 16-bit headers."""

    def __init__(self, compress: Compress) -> None:
        self._compress = compress
        self.data = bytearray()
        self._buf = bytearray()
        self.block_starts: list[int] = []

    def ref(self) -> tuple[int, int]:
        """(start of the current block in the compressed stream, offset inside it)."""
        return len(self.data), len(self._buf)

    def write(self, chunk: bytes) -> None:
        self._buf += chunk
        while len(self._buf) >= METADATA_SIZE:
            self._flush(bytes(self._buf[:METADATA_SIZE]))
            del self._buf[:METADATA_SIZE]

    def _flush(self, block: bytes) -> None:
        self.block_starts.append(len(self.data))
        packed = self._compress(block)
        if len(packed) < len(block):
            self.data += struct.pack("<H", len(packed)) + packed
        else:
            self.data += struct.pack("<H", len(block) | UNCOMPRESSED_META) + block

    def finish(self) -> bytes:
        if self._buf:
            self._flush(bytes(self._buf))
            self._buf.clear()
        return bytes(self.data)


@dataclass(slots=True)
class _Placement:
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

    def write_all(self) -> dict[int, _Placement]:
        placements: dict[int, _Placement] = {}
        for inode in _inodes_in_data_order(self.tree):
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

    def _plan_file(self, inode: Inode) -> _Placement:
        place = _Placement(inode.size)
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


def _inodes_in_data_order(tree: Tree) -> Iterator[Inode]:
    """Each regular file's data once (hardlinks share it), in layer order so every layer is read forward."""
    seen: set[int] = set()
    inodes = []
    for node in tree.nodes.values():
        if node.inode is not None and id(node.inode) not in seen:
            seen.add(id(node.inode))
            inodes.append(node.inode)
    inodes.sort(key=lambda i: (i.layer, i.offset))
    return iter(inodes)


class _Ids:
    def __init__(self) -> None:
        self.index: dict[int, int] = {}

    def __call__(self, value: int) -> int:
        found = self.index.get(value)
        if found is None:
            if not 0 <= value < 1 << 32:
                raise ConvertError(f"uid/gid {value} does not fit in squashfs (0 to 4294967295)")
            if len(self.index) >= 1 << 16:
                raise ConvertError("the image uses more than 65536 distinct uids/gids, more than squashfs can hold")
            found = self.index[value] = len(self.index)
        return found


class _Xattrs:
    """The xattr key/value table and its id table; identical sets are stored once."""

    def __init__(self, compress: Compress) -> None:
        self.kv = MetadataWriter(compress)
        self.ids: list[tuple[int, int, int]] = []  # (ref, count, size)
        self._known: dict[tuple[tuple[str, str], ...], int] = {}
        self.dropped: set[str] = set()

    def __call__(self, pairs: tuple[tuple[str, str], ...]) -> int:
        if not pairs:
            return NO_XATTR
        found = self._known.get(pairs)
        if found is not None:
            return found
        encoded = []
        listed = 0  # what listxattr returns: each full name and its NUL, plus the values (as mksquashfs counts)
        for key, value in pairs:
            name = key.split(".xattr.", 1)[1] if ".xattr." in key else key
            prefix = next((p for p in XATTR_PREFIXES if name.startswith(p)), None)
            if prefix is None:
                self.dropped.add(name)
                continue
            raw_name = name[len(prefix):].encode("utf-8", "surrogateescape")
            raw_value = value.encode("utf-8", "surrogateescape")
            encoded.append(struct.pack("<HH", XATTR_PREFIXES[prefix], len(raw_name)) + raw_name
                           + struct.pack("<I", len(raw_value)) + raw_value)
            listed += len(prefix) + len(raw_name) + 1 + len(raw_value)
        if not encoded:
            self._known[pairs] = NO_XATTR
            return NO_XATTR
        block, offset = self.kv.ref()
        body = b"".join(encoded)
        self.kv.write(body)
        found = self._known[pairs] = len(self.ids)
        self.ids.append(((block << 16) | offset, len(encoded), listed))
        return found


@dataclass(slots=True)
class _Entry:
    name: bytes
    kind: int
    ref: int
    number: int


@dataclass(slots=True)
class _Open:
    """A directory being written: its children are written first (depth first, no recursion)."""

    path: str
    number: int
    parent: int
    pending: Iterator[str]
    entries: list[_Entry] = field(default_factory=list)
    subdirs: int = 0


def _name(path: str) -> bytes:
    name = path.rpartition("/")[2].encode("utf-8", "surrogateescape")
    if len(name) > 256:
        raise ConvertError(f"/{path}: a name longer than 256 bytes cannot be stored in squashfs")
    return name


class _Tables:
    """Inode and directory tables, written depth first: a directory after everything below it."""

    def __init__(self, tree: Tree, own: Ownership, placements: dict[int, _Placement], compress: Compress) -> None:
        self.tree, self.own, self.placements = tree, own, placements
        self.inodes = MetadataWriter(compress)
        self.dirs = MetadataWriter(compress)
        self.ids = _Ids()
        self.xattrs = _Xattrs(compress)
        self._written: dict[int, tuple[int, int]] = {}  # id(Inode) → (ref, number): hardlinks share it
        self._links: dict[int, int] = {}
        others = 0
        for node in tree.nodes.values():
            if node.inode is not None:
                self._links[id(node.inode)] = self._links.get(id(node.inode), 0) + 1
            elif node.kind != "dir":
                others += 1
        # directories are numbered first: a directory inode names its parent's number
        dirs = sorted(p for p, n in tree.nodes.items() if n.kind == "dir")
        self._dir_numbers = {p: n for n, p in enumerate(dirs, 1)}
        self._next = len(dirs) + 1
        self.count = len(dirs) + others + len(self._links)
        self.refs = [0] * self.count  # inode ref by inode number - 1: the export table

    def write(self) -> int:
        """Write every inode and directory listing; returns the root inode's reference."""
        stack = [self._open("", 0)]
        while True:
            frame = stack[-1]
            child = next(frame.pending, None)
            if child is None:
                stack.pop()
                ref = self._close(frame)
                if not stack:
                    return ref
                stack[-1].entries.append(_Entry(_name(frame.path), DIR, ref, frame.number))
                stack[-1].subdirs += 1
                continue
            node = self.tree.nodes[child]
            if node.kind == "dir":
                stack.append(self._open(child, frame.number))
            else:
                kind, ref, number = self._leaf(child, node)
                frame.entries.append(_Entry(_name(child), kind, ref, number))

    def _open(self, path: str, parent: int) -> _Open:
        children = sorted(self.tree.children.get(path, ()),
                          key=lambda p: p.rpartition("/")[2].encode("utf-8", "surrogateescape"))
        return _Open(path, self._dir_numbers[path], parent, iter(children))

    def _header(self, kind: int, meta: Meta, mode: int, number: int) -> bytes:
        uid, gid = (0, 0) if self.own.all_root else (meta.uid, meta.gid)
        return struct.pack("<HHHHII", kind, mode & 0o7777, self.ids(uid), self.ids(gid), meta.mtime, number)

    def _place(self, number: int) -> int:
        block, offset = self.inodes.ref()
        ref = (block << 16) | offset
        self.refs[number - 1] = ref
        return ref

    def _close(self, d: _Open) -> int:
        meta = self.tree.nodes[d.path].meta
        assert meta is not None
        listing_block, listing_offset = self.dirs.ref()
        listing = _listing(d.entries)
        self.dirs.write(listing)
        mode = self.own.mode("dir", meta.mode, d.path.count("/") + 1 if d.path else 0)
        xattr = self.xattrs(meta.xattrs)
        parent = d.parent or self.count + 1  # the root's parent: one past the last inode, as mksquashfs writes
        size = len(listing) + 3  # the kernel counts the "." and ".." it synthesises as 3 bytes
        ref = self._place(d.number)
        if size <= 0xFFFF and xattr == NO_XATTR:
            self.inodes.write(self._header(DIR, meta, mode, d.number) + struct.pack(
                "<IIHHI", listing_block, 2 + d.subdirs, size, listing_offset, parent))
        else:
            self.inodes.write(self._header(DIR + EXTENDED, meta, mode, d.number) + struct.pack(
                "<IIIIHHI", 2 + d.subdirs, size, listing_block, parent, 0, listing_offset, xattr))
        return ref

    def _leaf(self, path: str, node: Node) -> tuple[int, int, int]:
        inode = node.inode
        if inode is not None and id(inode) in self._written:
            ref, number = self._written[id(inode)]
            return FILE, ref, number
        number = self._next
        self._next += 1
        ref = self._place(number)
        depth = path.count("/") + 1
        if inode is not None:
            meta = inode.meta
            place = self.placements[id(inode)]
            links = self._links[id(inode)]
            xattr = self.xattrs(meta.xattrs)
            head = self._header
            mode = self.own.mode("file", meta.mode, depth)
            sizes = struct.pack(f"<{len(place.blocks)}I", *place.blocks)
            basic = links == 1 and xattr == NO_XATTR and not place.sparse
            if basic and place.size < 1 << 32 and place.start < 1 << 32:
                self.inodes.write(head(FILE, meta, mode, number) + struct.pack(
                    "<IIII", place.start, place.fragment, place.fragment_offset, place.size) + sizes)
            else:
                self.inodes.write(head(FILE + EXTENDED, meta, mode, number) + struct.pack(
                    "<QQQIIII", place.start, place.size, place.sparse, links, place.fragment, place.fragment_offset,
                    xattr)
                    + sizes)
            self._written[id(inode)] = (ref, number)
            return FILE, ref, number
        meta = node.meta
        assert meta is not None
        xattr = self.xattrs(meta.xattrs)
        mode = self.own.mode(node.kind, meta.mode, depth)
        if node.kind == "symlink":
            mode = 0o777  # what Linux shows for every symlink, and what mksquashfs and tar2sqfs store
            target = node.target.encode("utf-8", "surrogateescape")
            if xattr == NO_XATTR:
                self.inodes.write(self._header(SYMLINK, meta, mode, number)
                                  + struct.pack("<II", 1, len(target)) + target)
            else:
                self.inodes.write(self._header(SYMLINK + EXTENDED, meta, mode, number)
                                  + struct.pack("<II", 1, len(target)) + target + struct.pack("<I", xattr))
            return SYMLINK, ref, number
        if node.kind == "fifo":
            if xattr == NO_XATTR:
                self.inodes.write(self._header(FIFO, meta, mode, number) + struct.pack("<I", 1))
            else:
                self.inodes.write(self._header(FIFO + EXTENDED, meta, mode, number) + struct.pack("<II", 1, xattr))
            return FIFO, ref, number
        raise ConvertError(f"/{path}: cannot store a {node.kind} in squashfs")


def _listing(entries: list[_Entry]) -> bytes:
    """A directory's listing: runs of entries under headers that share an inode block and a base number."""
    out = bytearray()
    i = 0
    while i < len(entries):
        first = entries[i]
        block, base = first.ref >> 16, first.number
        j = i + 1
        while (j < len(entries) and j - i < DIR_ENTRIES_PER_HEADER and entries[j].ref >> 16 == block
               and -0x8000 <= entries[j].number - base <= 0x7FFF):
            j += 1
        out += struct.pack("<III", j - i - 1, block, base)
        for e in entries[i:j]:
            out += struct.pack("<HhHH", e.ref & 0xFFFF, e.number - base, e.kind, len(e.name) - 1) + e.name
        i = j
    return bytes(out)


def _table(out: BinaryIO, pos: int, items: bytes, compress: Compress) -> tuple[int, int]:
    """A lookup table (fragments, export, ids): metadata blocks, then the raw array of their positions.
    Returns (position of that array, position after it)."""
    meta = MetadataWriter(compress)
    meta.write(items)
    blocks = meta.finish()
    out.write(blocks)
    index = struct.pack(f"<{len(meta.block_starts)}Q", *(pos + s for s in meta.block_starts))
    out.write(index)
    return pos + len(blocks), pos + len(blocks) + len(index)


def write(tree: Tree, path: Path, algo: str, level: int, *, own: Ownership = Ownership(),
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
        tables = _Tables(tree, own, placements, compress)
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
        fragment_table, pos = _table(out, pos, b"".join(
            struct.pack("<QII", start, word, 0) for start, word in data.fragment_entries), compress)
        export_table, pos = _table(out, pos, struct.pack(f"<{len(tables.refs)}Q", *tables.refs), compress)
        id_table, pos = _table(out, pos, struct.pack(f"<{len(tables.ids.index)}I", *tables.ids.index), compress)
        xattr_table, flags = NO_TABLE, FLAG_EXPORTABLE
        if tables.xattrs.ids:
            kv_start = pos
            kv = tables.xattrs.kv.finish()
            out.write(kv)
            pos += len(kv)
            ids = MetadataWriter(compress)
            ids.write(b"".join(struct.pack("<QII", ref, count, size) for ref, count, size in tables.xattrs.ids))
            id_blocks = ids.finish()
            out.write(id_blocks)
            xattr_table = pos + len(id_blocks)
            out.write(struct.pack("<QII", kv_start, len(tables.xattrs.ids), 0)
                      + struct.pack(f"<{len(ids.block_starts)}Q", *(pos + s for s in ids.block_starts)))
            pos = xattr_table + 16 + 8 * len(ids.block_starts)
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
