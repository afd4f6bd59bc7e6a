"""The merged index's entries: a path's node (directory, file, symlink, fifo), a file's inode (shared by its
hardlinks, pointing at the byte range of its data in a layer), their metadata, and how a member's name and PAX
records become them."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConvertError
from .tarscan import Member

XATTR_PREFIXES = ("SCHILY.xattr.", "LIBARCHIVE.xattr.")
DROPPED_XATTRS = ("trusted.overlay.", "user.overlay.", "user.rootlesscontainers")
Xattrs = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class Meta:
    mode: int
    uid: int
    gid: int
    mtime: int
    xattrs: Xattrs = ()


@dataclass(slots=True, eq=False)
class Inode:
    """A regular file's data and metadata, shared by all of its hardlinked names."""

    meta: Meta
    size: int
    layer: int  # index of the layer holding the data; len(layers) for rootfs additions
    offset: int = 0  # data offset in that layer's uncompressed tar
    data: bytes | None = None  # rootfs additions carry their bytes


@dataclass(slots=True)
class Node:
    kind: str  # "dir" | "file" | "symlink" | "fifo"
    layer: int
    meta: Meta | None = None  # None for files: see inode
    inode: Inode | None = None
    target: str = ""


def normalise(name: str, what: str) -> str:
    """``name`` as a relative path without ``.``/``..``/empty parts; '' is the root."""
    bare = name[2:] if name.startswith("./") else name  # layers made with ``tar -C rootfs .`` say ./usr/…
    if bare and bare[0] not in "./" and bare[-1] != "/" and "//" not in bare and "/." not in bare:
        return bare  # the common case, already normal
    parts: list[str] = []
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise ConvertError(f"{what}: member {name!r} climbs out of the image root",
                                   hint="the image is malformed or hostile; it was not converted")
            parts.pop()
            continue
        parts.append(part)
    return "/".join(parts)


def joined(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def parent_of(path: str) -> str:
    return path.rpartition("/")[0]


def xattrs(pax: dict[str, str]) -> Xattrs:
    if not pax:
        return ()
    kept = []
    for key, value in pax.items():
        for prefix in XATTR_PREFIXES:
            if key.startswith(prefix) and not key[len(prefix):].startswith(DROPPED_XATTRS):
                kept.append((key, value))
    return tuple(sorted(kept))


def meta_of(member: Member) -> Meta:
    return Meta(member.mode & 0o7777, member.uid, member.gid, max(0, min(int(member.mtime), 2**32 - 1)),
                xattrs(member.pax_headers))
