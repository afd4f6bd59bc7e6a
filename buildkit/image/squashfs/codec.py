"""Squashfs compressors: the superblock's compressor ids, a compressor and a decompressor per algorithm, and
the version of what compresses here (a block copied from an earlier image must be the block this one would
write)."""

from __future__ import annotations

import functools
import hashlib
import lzma
import zlib
from collections.abc import Callable

from ...errors import ConvertError
from .blocks import BLOCK_SIZE, Compress

# the superblock's compressor ids (the kernel's squashfs_fs.h), and the same map the other way
COMPRESSORS = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}
COMPRESSOR_IDS = {name: number for number, name in COMPRESSORS.items()}


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


def decompressor(algo: str) -> Callable[[bytes, int], bytes]:
    """``(block, at most n bytes) → data`` for ``algo`` (to pack a fragment of an earlier image again)."""
    if algo == "zstd":
        import zstandard

        return lambda data, n: zstandard.ZstdDecompressor().decompress(data, max_output_size=n)
    if algo == "gzip":
        return lambda data, n: zlib.decompressobj().decompress(data, n)
    if algo == "xz":
        return lambda data, n: lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data, n)
    raise ConvertError(f"ckit does not read {algo} squashfs blocks")


@functools.cache
def codec_version(algo: str, level: int) -> str:
    """What compresses ``algo`` here: a block copied from an earlier image must be the block this one would
    write, and another library version may compress differently. The library's version where it tells it, and
    a digest of one test block compressed (liblzma does not tell its version to Python)."""
    if algo == "zstd":
        import zstandard

        name = f"zstd {'.'.join(map(str, zstandard.ZSTD_VERSION))}"
    else:
        name = f"zlib {zlib.ZLIB_RUNTIME_VERSION}" if algo == "gzip" else "xz"
    sample = b"".join(b"%d ckit test block %d\n" % (n, n * n % 977) for n in range(4000))[:BLOCK_SIZE]
    return f"{name} {hashlib.sha256(compressor(algo, level)()(sample)).hexdigest()[:16]}"
