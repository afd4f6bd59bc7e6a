"""Write a squashfs 4.0 image straight from the merged tree: no tar stream, no subprocess, nothing on disk
but the image.

File data (:mod:`.squashfs_data`) is read from the layers' byte ranges, or copied from an earlier image of the
same layers, and cut into 128 KiB blocks that a pool of threads compresses (:mod:`.squashfs_blocks`). Files
smaller than a block are packed into shared fragment blocks, as ``mksquashfs`` does by default. The tables
(:mod:`.squashfs_tables`: inodes, directories with their indexes, fragments, export, ids, xattrs) are built
once all data is written, in the order the kernel's and ``unsquashfs``'s sanity checks expect: inodes <
directories < fragment table < export table < id table < xattrs, each table's index right after its metadata
blocks.

Layout and field meanings follow the kernel's ``fs/squashfs/squashfs_fs.h``. Every block or metadata block
that does not shrink is stored uncompressed with its flag set (readers then copy it), so no reader is
ever handed a "compressed" block larger than its content. The output depends only on the tree and the
options, never on thread timing or on what was copied: the same input gives the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import lzma
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConvertError
from .flatten import Tree
from .layerfile import LayerTar
from .squashfs import COMPRESSOR_IDS
from .squashfs_blocks import BLOCK_SIZE, BlockWriter, Compress, Output
from .squashfs_copy import Earlier, Segment
from .squashfs_data import PROGRESS_STEP, DataWriter, Placement
from .squashfs_tables import Ownership, Tables, lookup_table

__all__ = ["BLOCK_SIZE", "PROGRESS_STEP", "Ownership", "Placement", "Stats", "codec_version", "compressor",
           "decompressor", "write"]

log = logging.getLogger("ckit.squashfs")

BLOCK_LOG = 17
NO_TABLE = 0xFFFFFFFFFFFFFFFF
FLAG_EXPORTABLE = 0x0080
FLAG_NO_XATTRS = 0x0200
FLAG_COMPRESSOR_OPTIONS = 0x0400
LZ4_LEGACY = 1
MAX_JOBS = 32  # threads by default: a big login node's cores are shared, and memory grows with each


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


@dataclass(frozen=True)
class Stats:
    inodes: int
    data_bytes: int
    bytes_used: int
    segments: list[Segment] = field(default_factory=list)  # per layer: where its data landed (for a record)
    copied: int = 0  # bytes of file data copied from earlier images
    compressed: int = 0  # bytes of file data read and compressed


def write(tree: Tree, path: Path, algo: str, level: int, *, own: Ownership | None = None,
          mkfs_time: int = 0, jobs: int | None = None, progress: Callable[[int], None] | None = None,
          earlier: dict[int, Earlier] | None = None, open_layer: Callable[[int], LayerTar] | None = None,
          write_behind: bool = False) -> Stats:
    """Write ``tree`` as a squashfs image at ``path`` (created or truncated). ``earlier``: segments of earlier
    images to copy layers' data from; ``open_layer``: prepares a layer the tree was replayed for;
    ``write_behind``: the file is the artifact, to be fsynced: its data is sent to the disk as it is written
    (:func:`buildkit.fsutil.start_writeback`), so the fsync has little left to wait for."""
    make = compressor(algo, level)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        if os.fstat(fd).st_size:  # only then: on ext4, truncating makes close() flush the whole new file
            os.ftruncate(fd, 0)
        options = compressor_options(algo, level)
        out = Output(fd, 96 + len(options), write_behind)  # the superblock is written last, at 0
        blocks = BlockWriter(out, make, jobs or min(os.cpu_count() or 1, MAX_JOBS))
        data = DataWriter(tree, blocks, progress, earlier=earlier, open_layer=open_layer)
        try:
            placements = data.write_all()
            tables = Tables(tree, own or Ownership(), placements, make())  # while placed copies still run
            bytes_used, superblock = _tables(out, blocks.pos, tables, data.fragment_entries, make(),
                                             algo=algo, mkfs_time=mkfs_time, options=bool(options))
            blocks.finish()
        finally:
            blocks.close()  # waits for the workers
            data.close()
        out.write(bytes(-bytes_used % 4096))
        out.write_at(0, superblock + options)
    finally:
        os.close(fd)
    return Stats(tables.count, sum(p.size for p in placements.values()), bytes_used, data.segments,
                 data.copied, data.compressed)


def _tables(out: Output, pos: int, tables: Tables, fragments: list[tuple[int, int]], compress: Compress, *,
            algo: str, mkfs_time: int, options: bool = False) -> tuple[int, bytes]:
    """Write the metadata tables at ``pos``; returns (bytes used, the superblock)."""
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
    fragment_table, pos = lookup_table(out, pos, b"".join(
        struct.pack("<QII", start, word, 0) for start, word in fragments), compress)
    export_table, pos = lookup_table(out, pos, tables.export(), compress)
    id_table, pos = lookup_table(out, pos, struct.pack(f"<{len(tables.ids.index)}I", *tables.ids.index), compress)
    xattr_table, flags = NO_TABLE, FLAG_EXPORTABLE | (FLAG_COMPRESSOR_OPTIONS if options else 0)
    if tables.xattrs.ids:
        xattr_table, pos = tables.xattrs.write_tables(out, pos, compress)
    else:
        flags |= FLAG_NO_XATTRS
    superblock = b"hsqs" + struct.pack(
        "<IIIIHHHHHHQQQQQQQQ", tables.count, mkfs_time, BLOCK_SIZE, len(fragments), COMPRESSOR_IDS[algo],
        BLOCK_LOG, flags, len(tables.ids.index), 4, 0, root, pos, id_table, xattr_table, inode_table,
        directory_table, fragment_table, export_table)
    return pos, superblock
