"""Squashfs metadata streams: 8 KiB blocks behind 16-bit headers (the inode, directory, id, xattr and lookup
tables are all written this way), and the lookup tables' layout: blocks, then the array of their positions."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .blocks import Output

METADATA_SIZE = 8192
UNCOMPRESSED_META = 0x8000  # flag in a metadata block's 16-bit header

Compress = Callable[[bytes], bytes]


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
