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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import ConvertError
from ..layers.flatten import Tree
from ..layers.nodes import Inode, Meta, Node
from .attributes import NO_XATTR, Ids, Xattrs
from .directories import Entry, Open, entry_name
from .directories import listing as dir_listing
from .metadata import Compress, MetadataWriter

if TYPE_CHECKING:
    from .data import Placement

# basic inode types; the extended variant of each is +7
DIR, FILE, SYMLINK, FIFO = 1, 2, 3, 6
EXTENDED = 7


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


class Tables:
    """Inode and directory tables, written depth first: a directory after everything below it."""

    def __init__(self, tree: Tree, own: Ownership, placements: dict[Inode, Placement], compress: Compress) -> None:
        self.tree, self.own, self.placements = tree, own, placements
        self.inodes = MetadataWriter(compress)
        self.dirs = MetadataWriter(compress)
        self.ids = Ids()
        self.xattrs = Xattrs(compress)
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
                stack[-1].entries.append(Entry(frame.name, DIR, ref, frame.number))
                stack[-1].subdirs += 1
                continue
            name, path = child
            node = nodes[path]
            if node.kind == "dir":
                stack.append(self._open(path, name, frame.number))
            else:
                kind, ref, number = self._leaf(path, node)
                frame.entries.append(Entry(name, kind, ref, number))

    def _open(self, path: str, name: bytes, parent: int) -> Open:
        children = sorted((entry_name(child), child) for child in self.tree.children.get(path, ()))
        return Open(path, self._dir_numbers[path], parent, iter(children), name)

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

    def _close(self, d: Open) -> int:
        meta = self.tree.nodes[d.path].meta
        assert meta is not None
        listing_block, listing_offset = self.dirs.ref()
        start = self.dirs.position()
        listing, anchors = dir_listing(d.entries)
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


