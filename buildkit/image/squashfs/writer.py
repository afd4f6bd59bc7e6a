"""Write a squashfs 4.0 image straight from the merged tree: no tar stream, no subprocess, nothing on disk
but the image.

File data (:mod:`.data`) is read from the layers' byte ranges, or copied from an earlier image of the
same layers, and cut into 128 KiB blocks that a pool of threads compresses (:mod:`.blocks`). Files
smaller than a block are packed into shared fragment blocks, as ``mksquashfs`` does by default. The tables
(:mod:`.tables`: inodes, directories with their indexes, fragments, export, ids, xattrs) are built
once all data is written, in the order the kernel's and ``unsquashfs``'s sanity checks expect: inodes <
directories < fragment table < export table < id table < xattrs, each table's index right after its metadata
blocks.

Layout and field meanings follow the kernel's ``fs/squashfs/squashfs_fs.h``. Every block or metadata block
that does not shrink is stored uncompressed with its flag set (readers then copy it), so no reader is
ever handed a "compressed" block larger than its content. The output depends only on the tree and the
options, never on thread timing or on what was copied: the same input gives the same bytes.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..layers.flatten import Tree
from ..layers.layerfile import LayerTar
from .blocks import BLOCK_SIZE, BlockWriter, Compress, Output
from .codec import COMPRESSOR_IDS, compressor, compressor_options
from .compression import Compression
from .copy import Earlier, Segment
from .data import PROGRESS_STEP, DataWriter, Placement
from .metadata import lookup_table
from .superblock import SQUASHFS_MAGIC, check
from .tables import Ownership, Tables

__all__ = ["BLOCK_SIZE", "PROGRESS_STEP", "Ownership", "Placement", "Stats", "build", "write"]

log = logging.getLogger("ckit.squashfs")

BLOCK_LOG = 17
NO_TABLE = 0xFFFFFFFFFFFFFFFF
FLAG_EXPORTABLE = 0x0080
FLAG_NO_XATTRS = 0x0200
FLAG_COMPRESSOR_OPTIONS = 0x0400
MAX_JOBS = 32  # threads by default: a big login node's cores are shared, and memory grows with each


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
          write_behind: bool = False, base: int = 0) -> Stats:
    """Write ``tree`` as a squashfs image at ``path`` (created or truncated), starting at byte ``base`` of it (the
    bytes before are the caller's to write, e.g. a SIF's header). ``earlier``: segments of earlier
    images to copy layers' data from; ``open_layer``: prepares a layer the tree was replayed for;
    ``write_behind``: the file is the artifact, to be fsynced: its data is sent to the disk as it is written
    (:func:`buildkit.fs.files.start_writeback`), so the fsync has little left to wait for."""
    make = compressor(algo, level)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        if os.fstat(fd).st_size:  # only then: on ext4, truncating makes close() flush the whole new file
            os.ftruncate(fd, 0)
        options = compressor_options(algo, level)
        out = Output(fd, 96 + len(options), write_behind, base)  # the superblock is written last, at 0
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



def build(out: Path, compression: Compression, tree: Tree, own: Ownership, *, mkfs_time: int = 0,
          progress: Callable[[int], None] | None = None, **reuse: Any) -> Stats:
    """Write ``tree`` as a squashfs image at ``out`` and check the result (``reuse``: see :func:`write`)."""
    stats = write(tree, out, compression.algo, compression.level, own=own, mkfs_time=mkfs_time, progress=progress,
                  **reuse)
    check(out, reuse.get("base", 0))
    return stats


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
    superblock = SQUASHFS_MAGIC + struct.pack(
        "<IIIIHHHHHHQQQQQQQQ", tables.count, mkfs_time, BLOCK_SIZE, len(fragments), COMPRESSOR_IDS[algo],
        BLOCK_LOG, flags, len(tables.ids.index), 4, 0, root, pos, id_table, xattr_table, inode_table,
        directory_table, fragment_table, export_table)
    return pos, superblock
