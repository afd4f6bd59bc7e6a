"""Squashfs compressors: the superblock's compressor ids, a compressor and a decompressor per algorithm, and
the version of what compresses here (a block copied from an earlier image must be the block this one would
write)."""

from __future__ import annotations

import functools
import hashlib
import lzma
import struct
import zlib
from collections.abc import Callable

from ...errors import ConvertError
from .blocks import BLOCK_SIZE, Compress

# the superblock's compressor ids (the kernel's squashfs_fs.h), and the same map the other way
COMPRESSORS = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}
COMPRESSOR_IDS = {name: number for number, name in COMPRESSORS.items()}
LZ4_LEGACY = 1  # the lz4 format version the kernel decodes


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
    if algo == "lz4":  # squashfs's lz4 is the raw block format (no frame, no size prefix); level > 1: LZ4 HC
        import lz4.block

        mode = {"mode": "high_compression", "compression": level} if level > 1 else {"mode": "default"}
        return lambda: (lambda data: lz4.block.compress(data, store_size=False, **mode))
    raise ConvertError(f"ckit does not write {algo} squashfs", hint="use zstd, lz4, gzip or xz")


def compressor_options(algo: str, level: int) -> bytes:
    """The compressor options metadata block after the superblock (flag COMPRESSOR_OPTIONS), or nothing. Only lz4
    needs one: the kernel refuses an lz4 squashfs without it (version 1, the legacy format it decodes; flag 1:
    written with LZ4 HC)."""
    if algo != "lz4":
        return b""
    return struct.pack("<HII", 8 | 0x8000, LZ4_LEGACY, 1 if level > 1 else 0)  # one uncompressed metadata block


def decompressor(algo: str) -> Callable[[bytes, int], bytes]:
    """``(block, at most n bytes) → data`` for ``algo`` (to pack a fragment of an earlier image again)."""
    if algo == "zstd":
        import zstandard

        return lambda data, n: zstandard.ZstdDecompressor().decompress(data, max_output_size=n)
    if algo == "gzip":
        return lambda data, n: zlib.decompressobj().decompress(data, n)
    if algo == "xz":
        return lambda data, n: lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data, n)
    if algo == "lz4":
        import lz4.block

        return lambda data, n: lz4.block.decompress(data, uncompressed_size=n)
    raise ConvertError(f"ckit does not read {algo} squashfs blocks")


@functools.cache
def codec_version(algo: str, level: int) -> str:
    """What compresses ``algo`` here: a block copied from an earlier image must be the block this one would
    write, and another library version may compress differently. The library's version where it tells it, and
    a digest of one test block compressed (liblzma does not tell its version to Python)."""
    if algo == "zstd":
        import zstandard

        name = f"zstd {'.'.join(map(str, zstandard.ZSTD_VERSION))}"
    elif algo == "lz4":
        import lz4

        name = f"lz4 {lz4.library_version_string()}"
    else:
        name = f"zlib {zlib.ZLIB_RUNTIME_VERSION}" if algo == "gzip" else "xz"
    sample = b"".join(b"%d ckit test block %d\n" % (n, n * n % 977) for n in range(4000))[:BLOCK_SIZE]
    return f"{name} {hashlib.sha256(compressor(algo, level)()(sample)).hexdigest()[:16]}"
