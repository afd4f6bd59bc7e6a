"""The ids and xattrs of a squashfs image: each uid/gid stored once in the id table, each distinct xattr set
once in the key/value table (the names squashfs cannot hold dropped and reported)."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ...errors import ConvertError
from .metadata import Compress, MetadataWriter

if TYPE_CHECKING:
    from .blocks import Output

NO_XATTR = 0xFFFFFFFF
XATTR_PREFIXES = {"user.": 0, "trusted.": 1, "security.": 2}


class Ids:
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


class Xattrs:
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
