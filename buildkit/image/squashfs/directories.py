"""Squashfs directory listings: a directory's entries in runs under shared headers, with the index anchors that
let a lookup in a large directory skip to the right metadata block."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from ...errors import ConvertError
from .metadata import METADATA_SIZE

DIR_ENTRIES_PER_HEADER = 256


@dataclass(slots=True)
class Entry:
    name: bytes
    kind: int
    ref: int
    number: int


@dataclass(slots=True)
class Open:
    """A directory being written: its children are written first (depth first, no recursion)."""

    path: str
    number: int
    parent: int
    pending: Iterator[tuple[bytes, str]]  # (name, path) of each child, in name order
    name: bytes = b""
    entries: list[Entry] = field(default_factory=list)
    subdirs: int = 0


def entry_name(path: str) -> bytes:
    name = path.rpartition("/")[2].encode("utf-8", "surrogateescape")
    if len(name) > 256:
        raise ConvertError(f"/{path}: a name longer than 256 bytes cannot be stored in squashfs")
    return name


def listing(entries: list[Entry]) -> tuple[bytes, list[tuple[int, bytes]]]:
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
