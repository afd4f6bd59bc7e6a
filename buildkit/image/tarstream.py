"""Pass 2 of the flattener: write the merged tree as one tar stream (see :mod:`.flatten`).

Order: directories, then symlinks and FIFOs (by name), then regular files in on-disk order so every layer
is read sequentially; file data is copied with ``sendfile`` (layer file → pipe, no copy through Python);
each hardlink follows the file it names. Headers are plain ustar when they fit, PAX otherwise (long names,
xattrs such as ``security.capability``).
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import ConvertError
from .flatten import Inode, Tree, Xattrs

PROGRESS_STEP = 4 << 20  # bytes of file data between progress reports
SMALL_FILE = 64 << 10  # copied through the buffer; larger files go by sendfile


@dataclass(frozen=True)
class Ownership:
    """How pass 2 rewrites ownership and modes: ``all_root`` like ``mksquashfs -all-root``,
    ``fixperms`` like Enroot's ``chmod -R u+rX`` plus ``u+w`` on directories up to depth 15."""

    all_root: bool = False
    fixperms: bool = False


def _mode(node_kind: str, mode: int, depth: int, own: Ownership) -> int:
    if own.fixperms:
        mode |= 0o400
        if node_kind == "dir" or mode & 0o111:
            mode |= 0o100
        if node_kind == "dir" and depth <= 15:
            mode |= 0o200
    return mode


def write_tar(tree: Tree, out: BinaryIO, own: Ownership = Ownership(),
              progress: Callable[[int], None] | None = None) -> int:
    """Write the merged tree to ``out`` as one tar; returns the file bytes written."""
    written_inodes: dict[int, str] = {}
    files = {i: open(layer.path, "rb") for i, layer in enumerate(tree.layers)}  # noqa: SIM115
    total = reported = 0
    try:
        for path, node in tree.entries():
            meta = node.inode.meta if node.inode is not None else node.meta
            assert meta is not None
            name = "./" + path if path else "./"
            mode = _mode(node.kind, meta.mode, path.count("/") + 1 if path else 0, own)
            uid, gid = (0, 0) if own.all_root else (meta.uid, meta.gid)
            inode, size, linkname = node.inode, 0, ""
            if node.kind == "dir":
                kind = tarfile.DIRTYPE
            elif node.kind == "symlink":
                kind, linkname = tarfile.SYMTYPE, node.target
            elif node.kind == "fifo":
                kind = tarfile.FIFOTYPE
            elif inode is not None and id(inode) in written_inodes:
                kind, linkname = tarfile.LNKTYPE, written_inodes[id(inode)]
            else:
                assert inode is not None
                kind, size = tarfile.REGTYPE, inode.size
                written_inodes[id(inode)] = name
            out.write(_header(name, kind, mode, uid, gid, size, meta.mtime, linkname, meta.xattrs))
            if kind == tarfile.REGTYPE and inode is not None:
                _copy_data(inode, tree, files, out)
                total += inode.size
                if progress and total - reported >= PROGRESS_STEP:  # a bar update per file costs more than small files
                    progress(total - reported)
                    reported = total
        out.write(b"\0" * (tarfile.BLOCKSIZE * 2))
        out.flush()
        if progress and total > reported:
            progress(total - reported)
    finally:
        for f in files.values():
            f.close()
    return total


def _header(name: str, kind: bytes, mode: int, uid: int, gid: int, size: int, mtime: int, linkname: str,
            xattrs: Xattrs) -> bytes:
    """One tar header: plain ustar when it fits (fast path), else PAX via tarfile (long names, xattrs)."""
    bname = name.encode("utf-8", "surrogateescape")
    blink = linkname.encode("utf-8", "surrogateescape")
    if xattrs or len(bname) > 100 or len(blink) > 100 or max(uid, gid) >= 8**7 or size >= 8**11:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.uid, info.gid, info.size, info.mtime = kind, mode, uid, gid, size, mtime
        info.linkname, info.uname, info.gname, info.pax_headers = linkname, "", "", dict(xattrs)
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    head = b"".join((
        bname.ljust(100, b"\0"), b"%07o\0" % mode, b"%07o\0" % uid, b"%07o\0" % gid, b"%011o\0" % size,
        b"%011o\0" % mtime, b" " * 8, kind, blink.ljust(100, b"\0"), b"ustar\x0000", b"\0" * 64,
        b"0000000\0" * 2, b"\0" * 167,
    ))
    checksum = b"%06o\0 " % sum(head)
    return head[:148] + checksum + head[156:]


def _copy_data(inode: Inode, tree: Tree, files: dict[int, BinaryIO], out: BinaryIO) -> None:
    if inode.data is not None:
        out.write(inode.data)
    elif inode.size <= SMALL_FILE:  # one pread into the write buffer: fewer syscalls than a flush + sendfile
        layer = tree.layers[inode.layer]
        data = os.pread(files[inode.layer].fileno(), inode.size, layer.offset + inode.offset)
        if len(data) != inode.size:
            raise ConvertError(f"{layer.what}: the layer ended early (truncated or changed while it was read)")
        out.write(data)
    else:
        layer = tree.layers[inode.layer]
        _sendfile(files[inode.layer], layer.offset + inode.offset, inode.size, out, layer.what)
    remainder = inode.size % tarfile.BLOCKSIZE
    if remainder:
        out.write(b"\0" * (tarfile.BLOCKSIZE - remainder))


def _sendfile(src: BinaryIO, offset: int, size: int, out: BinaryIO, what: str) -> None:
    try:
        out_fd = out.fileno()
    except (AttributeError, OSError, ValueError):
        return _copy_range(src, offset, size, out, what)
    out.flush()
    in_fd = src.fileno()
    while size > 0:
        sent = os.sendfile(out_fd, in_fd, offset, min(size, 1 << 30))
        if sent == 0:
            raise ConvertError(f"{what}: the layer ended early (truncated or changed while it was read)")
        offset += sent
        size -= sent


def _copy_range(src: BinaryIO, offset: int, size: int, out: BinaryIO, what: str) -> None:
    src.seek(offset)
    while size > 0:
        chunk = src.read(min(size, 1 << 20))
        if not chunk:
            raise ConvertError(f"{what}: the layer ended early (truncated or changed while it was read)")
        out.write(chunk)
        size -= len(chunk)
