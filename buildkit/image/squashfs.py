"""Squashfs from a tar stream (``tar2sqfs``, squashfs-tools-ng), compression choice, superblock checks.

``tar2sqfs`` reads the flattened tar on stdin and needs neither root nor a directory on the host: ownership,
modes, suid bits and xattrs come from the tar headers. It was faster than ``mksquashfs`` on an unpacked tree
on these machines (762 MB of /usr/lib at zstd level 3 with 2 jobs: 3.3 s vs 5.6 s), so ckit uses it for both
targets. Its superblock time is 0, or ``SOURCE_DATE_EPOCH`` when set, so the output is reproducible.

Compression ``ALGO[:LEVEL]``: without a level ckit uses the fast level of that algorithm (``zstd:3``,
``gzip:1``), never gzip's level 9 unless asked for.

lz4 is refused: tar2sqfs (squashfs-tools-ng 1.2) stores small lz4 metadata blocks (the id table of a
typical image) compressed even when that makes them larger, and squashfs-tools' ``unsquashfs`` (4.5.1)
rejects such an image as corrupt. ``enroot create`` (and so Pyxis) and apptainer's extraction fallback
unpack with ``unsquashfs``; a test keeps checking this against the installed tools.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import ConfigError, ConvertError
from ..process import require, stream_stdin

SQUASHFS_MAGIC = b"hsqs"
COMPRESSOR_IDS = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}
LEVELS = {"gzip": (1, 9), "zstd": (1, 22), "xz": (0, 9), "lzma": (0, 9), "lzo": (1, 9)}
FAST_LEVEL = {"gzip": 1, "zstd": 3}
# Preference when a site restricts what its runtime mounts: fast and small first, then the fast end of gzip,
# which every kernel mounts.
PREFERENCE = ("zstd:3", "gzip:1", "lzo", "xz")
ALGORITHMS = ("gzip", "zstd", "xz", "lzo")
DEFAULT = "zstd:3"
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


@dataclass(frozen=True)
class Compression:
    algo: str
    level: int | None = None

    @property
    def label(self) -> str:
        return self.algo if self.level is None else f"{self.algo}:{self.level}"

    def tar2sqfs_args(self) -> list[str]:
        args = ["-c", self.algo]
        if self.level is not None:
            args += ["-X", f"level={self.level}"] if self.algo != "lzo" else ["-X", f"algorithm=lzo1x_999,level={self.level}"]
        return args


def parse_compression(text: str) -> Compression:
    """``ALGO[:LEVEL]`` → Compression, or a ConfigError naming what is accepted."""
    algo, _, level_text = text.strip().lower().partition(":")
    accepted = "gzip[:1-9], zstd[:1-22], xz[:0-9], lzo[:1-9]"
    if algo == "lz4":
        raise ConfigError(f"--compress {text!r}: squashfs-tools' unsquashfs rejects the lz4 images tar2sqfs writes, "
                          "and enroot/Pyxis unpack with it",
                          hint="use zstd:1 (as fast here, smaller) or gzip:1 for kernels without zstd")
    if algo not in ALGORITHMS:
        raise ConfigError(f"--compress {text!r}: unknown algorithm {algo!r}", hint=f"use one of {accepted}")
    if not level_text:
        return Compression(algo, FAST_LEVEL.get(algo))
    low, high = LEVELS[algo]
    if not level_text.isdigit() or not low <= int(level_text) <= high:
        raise ConfigError(f"--compress {text!r}: level must be {low}..{high} for {algo}", hint=f"use one of {accepted}")
    return Compression(algo, int(level_text))


def choose(requested: str | None, allowed: Sequence[str] = (), *, site_name: str = "") -> Compression:
    """The user's choice (checked against the site), else the first of PREFERENCE the site can mount."""
    if requested:
        chosen = parse_compression(requested)
        if allowed and chosen.algo not in allowed:
            raise ConfigError(f"--compress {requested}: site {site_name} cannot mount {chosen.algo} squashfs",
                              hint=f"the site's runtime mounts: {', '.join(allowed)}")
        return chosen
    for candidate in PREFERENCE:
        chosen = parse_compression(candidate)
        if not allowed or chosen.algo in allowed:
            return chosen
    raise ConfigError(f"site {site_name}: none of its squashfs compressions ({', '.join(allowed)}) is supported",
                      hint="list gzip, zstd, xz or lzo in the site profile (ckit does not write lz4 or lzma)")


QUEUE_BACKLOG = 256  # blocks (128 KiB each) waiting for the compressors: 32 MiB at most, whatever the image size


def tar2sqfs_argv(out: Path, compression: Compression, jobs: int | None = None) -> list[str]:
    """tar2sqfs's command line. The block backlog is raised from its default (10 per job): fed through a pipe,
    tar2sqfs otherwise stalls the writer whenever the compressors fall behind (measured: about 10% faster)."""
    exe = require("tar2sqfs", purpose="build squashfs images", package="squashfs-tools-ng")
    jobs = jobs or os.cpu_count() or 1
    return [exe, "--quiet", "--force", "--no-skip", "--exportable", "--num-jobs", str(jobs),
            "--queue-backlog", str(max(QUEUE_BACKLOG, 10 * jobs)), *compression.tar2sqfs_args(), str(out)]


def build(out: Path, compression: Compression, write_tar: Callable[[BinaryIO], object],
          env: dict[str, str] | None = None) -> None:
    """Run tar2sqfs on ``out`` and let ``write_tar`` stream the tar into its stdin; check the result."""
    argv = tar2sqfs_argv(out, compression)
    try:
        with stream_stdin(argv, step="squashfs (tar2sqfs)", env=env) as proc:
            assert proc.stdin is not None
            _grow_pipe(proc.stdin.fileno())
            with io.BufferedWriter(io.FileIO(proc.stdin.fileno(), "wb", closefd=False), buffer_size=1 << 20) as pipe:
                write_tar(pipe)
    except BrokenPipeError as err:
        raise ConvertError("squashfs (tar2sqfs) stopped reading the tar stream", hint="see its error above") from err
    check(out)


def _grow_pipe(fd: int) -> None:
    """A 1 MiB pipe buffer: fewer context switches between ckit and tar2sqfs (best effort)."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, F_SETPIPE_SZ, 1 << 20)


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
    if major != 4 or comp not in COMPRESSOR_IDS:
        raise ConvertError(f"unsupported squashfs (version {major}, compressor id {comp})")
    return Superblock(inodes, mkfs_time, block_size, COMPRESSOR_IDS[comp], bytes_used)


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
