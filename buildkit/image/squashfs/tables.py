"""The metadata of a squashfs 4.0 image: the inode and directory tables, ids, xattrs and lookup tables.

Everything here is built once the file data is written (:mod:`.writer`), because a file's inode holds
where its blocks landed. Directories are written depth first, a directory after everything below it, so each
listing can name its entries' inode references; directories are numbered first, so each can name its parent.
Field layouts follow the kernel's ``fs/squashfs/squashfs_fs.h``.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...errors import ConvertError
from ..layers.flatten import Inode, Meta, Node, Tree

if TYPE_CHECKING:
    from .blocks import Output
    from .data import Placement

METADATA_SIZE = 8192
UNCOMPRESSED_META = 0x8000  # flag in a metadata block's 16-bit header
NO_XATTR = 0xFFFFFFFF
DIR_ENTRIES_PER_HEADER = 256
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

    def position(self) -> int:
        """How many bytes of content were written so far (the uncompressed position)."""
        return len(self.block_starts) * METADATA_SIZE + len(self._buf)

    def block_start(self, position: int) -> int:
        """Where the block that holds content byte ``position`` starts in the compressed stream (the block
        being filled starts where the stream ends now)."""
        number = position // METADATA_SIZE
        return self.block_starts[number] if number < len(self.block_starts) else len(self.data)

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


class _Ids:
    def __init__(self) -> None:
        self.index: dict[int, int] = {}

    def __call__(self, value: int) -> int:
        found = self.index.get(value)
        if found is None:
            if not 0 <= value < 1 << 32:
                raise ConvertError(f"uid/gid {value} does not fit in squashfs (0 to 4294967295)")
            if len(self.index) >= 0xFFFF:  # the superblock counts ids in 16 bits
                raise ConvertError("the image uses more than 65535 distinct uids/gids, more than squashfs can hold",
                                   hint="a .sqsh (all files owned by root) has no such limit")
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

    def write_tables(self, out: Output, pos: int, compress: Compress) -> tuple[int, int]:
        """The key/value blocks, then the id table, then its header and index, at ``pos`` of ``out``.
        Returns (the header's position, for the superblock; the position after)."""
        kv = self.kv.finish()
        out.write(kv)
        ids = MetadataWriter(compress)
        ids.write(b"".join(struct.pack("<QII", ref, count, size) for ref, count, size in self.ids))
        id_blocks = ids.finish()
        out.write(id_blocks)
        ids_at, header = pos + len(kv), pos + len(kv) + len(id_blocks)
        out.write(struct.pack("<QII", pos, len(self.ids), 0)
                  + struct.pack(f"<{len(ids.block_starts)}Q", *(ids_at + s for s in ids.block_starts)))
        return header, header + 16 + 8 * len(ids.block_starts)


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
    pending: Iterator[tuple[bytes, str]]  # (name, path) of each child, in name order
    name: bytes = b""
    entries: list[_Entry] = field(default_factory=list)
    subdirs: int = 0


def _name(path: str) -> bytes:
    name = path.rpartition("/")[2].encode("utf-8", "surrogateescape")
    if len(name) > 256:
        raise ConvertError(f"/{path}: a name longer than 256 bytes cannot be stored in squashfs")
    return name


class Tables:
    """Inode and directory tables, written depth first: a directory after everything below it."""

    def __init__(self, tree: Tree, own: Ownership, placements: dict[Inode, Placement], compress: Compress) -> None:
        self.tree, self.own, self.placements = tree, own, placements
        self.inodes = MetadataWriter(compress)
        self.dirs = MetadataWriter(compress)
        self.ids = _Ids()
        self.xattrs = _Xattrs(compress)
        # Only hardlinked files are kept by inode (their names share one): a dict entry for every file cost
        # about 20 MB at the writer's peak on a 4 GB image. Keyed by the Inode itself (hashed by identity), not by
        # id(): no int object per key.
        self._written: dict[Inode, tuple[int, int]] = {}  # (ref, number) of a hardlinked file once written
        self._links: dict[Inode, int] = {}  # names of each file that has more than one
        seen: set[Inode] = set()
        others = 0
        for node in tree.nodes.values():
            inode = node.inode
            if inode is None:
                others += node.kind != "dir"
            elif inode in seen:
                self._links[inode] = self._links.get(inode, 1) + 1
            else:
                seen.add(inode)
        # directories are numbered first: a directory inode names its parent's number
        dirs = sorted(p for p, n in tree.nodes.items() if n.kind == "dir")
        self._dir_numbers = {p: n for n, p in enumerate(dirs, 1)}
        self._next = len(dirs) + 1
        self.count = len(dirs) + others + len(seen)
        self.refs = array("Q", bytes(8 * self.count))  # inode ref by inode number - 1: the export table

    def write(self) -> int:
        """Write every inode and directory listing; returns the root inode's reference."""
        stack = [self._open("", b"", 0)]
        nodes = self.tree.nodes
        while True:
            frame = stack[-1]
            child = next(frame.pending, None)
            if child is None:
                stack.pop()
                ref = self._close(frame)
                if not stack:
                    return ref
                stack[-1].entries.append(_Entry(frame.name, DIR, ref, frame.number))
                stack[-1].subdirs += 1
                continue
            name, path = child
            node = nodes[path]
            if node.kind == "dir":
                stack.append(self._open(path, name, frame.number))
            else:
                kind, ref, number = self._leaf(path, node)
                frame.entries.append(_Entry(name, kind, ref, number))

    def _open(self, path: str, name: bytes, parent: int) -> _Open:
        children = sorted((_name(child), child) for child in self.tree.children.get(path, ()))
        return _Open(path, self._dir_numbers[path], parent, iter(children), name)

    def export(self) -> bytes:
        """The export table's content: every inode's reference by number (little-endian u64)."""
        return _little(self.refs)

    def _header(self, kind: int, meta: Meta, mode: int, number: int) -> bytes:
        uid, gid = (0, 0) if self.own.all_root else (meta.uid, meta.gid)
        known = self.ids.index
        uid_index = known[uid] if uid in known else self.ids(uid)
        gid_index = known[gid] if gid in known else self.ids(gid)
        return struct.pack("<HHHHII", kind, mode & 0o7777, uid_index, gid_index, meta.mtime, number)

    def _place(self, number: int) -> int:
        block, offset = self.inodes.ref()
        ref = (block << 16) | offset
        self.refs[number - 1] = ref
        return ref

    def _close(self, d: _Open) -> int:
        meta = self.tree.nodes[d.path].meta
        assert meta is not None
        listing_block, listing_offset = self.dirs.ref()
        start = self.dirs.position()
        listing, anchors = _listing(d.entries)
        self.dirs.write(listing)
        # the directory index: where each anchored header lies, so a lookup jumps near its name
        index = b"".join(struct.pack("<III", at, self.dirs.block_start(start + at), len(name) - 1) + name
                         for at, name in anchors)
        mode = self.own.mode("dir", meta.mode, d.path.count("/") + 1 if d.path else 0)
        xattr = self.xattrs(meta.xattrs)
        parent = d.parent or self.count + 1  # the root's parent: one past the last inode, as mksquashfs writes
        size = len(listing) + 3  # the kernel counts the "." and ".." it synthesises as 3 bytes
        ref = self._place(d.number)
        if size <= 0xFFFF and xattr == NO_XATTR and not anchors:
            self.inodes.write(self._header(DIR, meta, mode, d.number) + struct.pack(
                "<IIHHI", listing_block, 2 + d.subdirs, size, listing_offset, parent))
        else:
            self.inodes.write(self._header(DIR + EXTENDED, meta, mode, d.number) + struct.pack(
                "<IIIIHHI", 2 + d.subdirs, size, listing_block, parent, len(anchors), listing_offset, xattr)
                + index)
        return ref

    def _leaf(self, path: str, node: Node) -> tuple[int, int, int]:
        inode = node.inode
        if inode is not None and inode in self._written:
            ref, number = self._written[inode]
            return FILE, ref, number
        number = self._next
        self._next += 1
        ref = self._place(number)
        depth = path.count("/") + 1
        if inode is not None:
            meta = inode.meta
            place = self.placements[inode]
            links = self._links.get(inode, 1)
            xattr = self.xattrs(meta.xattrs) if meta.xattrs else NO_XATTR
            mode = self.own.mode("file", meta.mode, depth)
            sizes = _words(place.blocks)
            if links == 1 and xattr == NO_XATTR and not place.sparse and place.size < 1 << 32 \
                    and place.start < 1 << 32:
                self.inodes.write(self._header(FILE, meta, mode, number) + struct.pack(
                    "<IIII", place.start, place.fragment, place.fragment_offset, place.size) + sizes)
            else:
                self.inodes.write(self._header(FILE + EXTENDED, meta, mode, number) + struct.pack(
                    "<QQQIIII", place.start, place.size, place.sparse, links, place.fragment, place.fragment_offset,
                    xattr) + sizes)
            if links > 1:
                self._written[inode] = (ref, number)
            return FILE, ref, number
        assert node.meta is not None
        meta = node.meta
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


def _words(blocks: Sequence[int]) -> bytes:
    """Block size words as the inode stores them (little-endian u32)."""
    if not blocks:
        return b""
    return _little(array("I", blocks))


def _little(values: array[int]) -> bytes:
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _listing(entries: list[_Entry]) -> tuple[bytes, list[tuple[int, bytes]]]:
    """A directory's listing: runs of entries under headers that share an inode block and a base number.

    Also its index anchors, as ``mksquashfs`` places them: a new header starts (and is anchored: its offset
    and first name go into the directory inode's index) whenever the entries since the last anchor would
    pass one metadata block. A lookup then reads the index and scans at most about 8 KiB of the listing,
    where without an index the kernel scans a large directory from its start on every lookup."""
    out = bytearray()
    anchors: list[tuple[int, bytes]] = []
    anchor = 0
    i = 0
    while i < len(entries):
        first = entries[i]
        if i and len(out) + 8 + len(first.name) - anchor > METADATA_SIZE:
            anchor = len(out)
            anchors.append((anchor, first.name))
        block, base = first.ref >> 16, first.number
        end = len(out) + 12 + 8 + len(first.name)  # after the header and the first entry
        j = i + 1
        while j < len(entries) and j - i < DIR_ENTRIES_PER_HEADER:
            e = entries[j]
            end += 8 + len(e.name)
            if e.ref >> 16 != block or not -0x8000 <= e.number - base <= 0x7FFF or end - anchor > METADATA_SIZE:
                break
            j += 1
        out += struct.pack("<III", j - i - 1, block, base)
        for e in entries[i:j]:
            out += struct.pack("<HhHH", e.ref & 0xFFFF, e.number - base, e.kind, len(e.name) - 1) + e.name
        i = j
    return bytes(out), anchors


def lookup_table(out: Output, pos: int, items: bytes, compress: Compress) -> tuple[int, int]:
    """A lookup table (fragments, export, ids): metadata blocks, then the raw array of their positions.
    Returns (position of that array, position after it)."""
    meta = MetadataWriter(compress)
    meta.write(items)
    blocks = meta.finish()
    out.write(blocks)
    index = struct.pack(f"<{len(meta.block_starts)}Q", *(pos + s for s in meta.block_starts))
    out.write(index)
    return pos + len(blocks), pos + len(blocks) + len(index)
