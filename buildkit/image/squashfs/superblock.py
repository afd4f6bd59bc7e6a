"""The squashfs superblock: read, and checked against the file that holds it."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ...errors import ConvertError
from .codec import COMPRESSORS

SQUASHFS_MAGIC = b"hsqs"


@dataclass(frozen=True)
class Superblock:
    inodes: int
    mkfs_time: int
    block_size: int
    compression: str
    bytes_used: int


def read_superblock(f: BinaryIO, offset: int = 0) -> Superblock:
    f.seek(offset)
    raw = f.read(96)
    if len(raw) < 96 or raw[:4] != SQUASHFS_MAGIC:
        raise ConvertError("no squashfs superblock found")
    inodes, mkfs_time, block_size, _frags, comp, _log, _flags, _ids, major, _minor = struct.unpack_from(
        "<IIIIHHHHHH", raw, 4)
    bytes_used = struct.unpack_from("<Q", raw, 40)[0]
    if major != 4 or comp not in COMPRESSORS:
        raise ConvertError(f"unsupported squashfs (version {major}, compressor id {comp})")
    return Superblock(inodes, mkfs_time, block_size, COMPRESSORS[comp], bytes_used)


def check(path: Path, offset: int = 0) -> Superblock:
    """The superblock of the squashfs at ``offset`` of ``path``; its data must fit in the file."""
    try:
        with path.open("rb") as f:
            sb = read_superblock(f, offset)
    except OSError as err:
        raise ConvertError(f"{path}: cannot read: {err}") from err
    except ConvertError as err:
        raise ConvertError(f"{path}: {err.message}") from err
    if offset + sb.bytes_used > path.stat().st_size:
        raise ConvertError(f"{path}: the squashfs is truncated ({sb.bytes_used} bytes used, file shorter)")
    return sb
