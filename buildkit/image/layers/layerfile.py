"""Layer blobs as seekable, uncompressed tars: sniff the compression, spool compressed layers once.

An uncompressed layer (a docker-archive member, a plain OCI blob) is used where it lies, as a byte range of
its file. A gzip or zstd layer is decompressed into a spool file in the work dir. Pass 1 of the flattener then
reads headers by seeking and pass 2 copies data ranges; nothing is decompressed twice.

Every layer is verified before its content counts: against the blob's own digest (OCI layouts, registries)
while it is read or decompressed, and, for layers that have no digest of their own (a docker-archive member,
an engine's save), against the image config's ``rootfs.diff_ids`` entry, the digest of the uncompressed tar.

Compressed layers are decompressed in parallel, one thread per layer up to the CPU count (zlib, isal and
zstd work outside the GIL). gzip goes through ``isal`` (Intel's ISA-L, about twice zlib's speed) where its
wheels exist, else the standard ``zlib``.
"""

from __future__ import annotations

import logging
import os
import types
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ...errors import ConvertError, IntegrityError
from ...oci.digest import hasher, parse_digest
from ..sources.base import LayerBlob
from ..speed.cpushare import CpuShare

if TYPE_CHECKING:
    from .growing import Growing

gzip_codec: types.ModuleType
try:
    from isal import isal_zlib as gzip_codec
except ImportError:  # no isal wheel for this platform
    gzip_codec = zlib

log = logging.getLogger("ckit.layers")

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
XZ_MAGIC = b"\xfd7zXZ"
BZIP2_MAGIC = b"BZh"
CHUNK = 1 << 20


@dataclass(frozen=True)
class LayerTar:
    """An uncompressed layer tar: ``size`` bytes at ``offset`` of ``path``."""

    path: Path
    offset: int
    size: int
    what: str


def _head(blob: LayerBlob, n: int = 6) -> bytes:
    with blob.path.open("rb") as f:
        f.seek(blob.offset)
        return f.read(min(n, blob.size))


class _Hashing:
    """Reads a byte range and hashes what passes through (for a check against ``expected``, when given).

    Every read lands in one reused buffer: a fresh megabyte per read costs more than the hash of it (glibc gives
    each back to the kernel and takes it again, page by page: 2.7 s instead of 1.0 s for a 1.3 GB layer). So
    what :meth:`read` returns is valid only until the next read; its callers consume it at once."""

    def __init__(self, blob: LayerBlob, expected: str | None, progress: Callable[[int], None] | None) -> None:
        self._fd = os.open(blob.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._pos, self._end = blob.offset, blob.offset + blob.size
        self._buf = memoryview(bytearray(CHUNK))
        self.sha = hasher(parse_digest(expected, blob.what)) if expected else None
        self._progress = progress

    def read(self, n: int = -1) -> memoryview:
        want = min(n if n and n > 0 else CHUNK, CHUNK, self._end - self._pos)
        data = self._buf[:os.preadv(self._fd, [self._buf[:want]], self._pos)] if want > 0 else self._buf[:0]
        self._pos += len(data)
        if self.sha is not None:
            self.sha.update(data)
        if self._progress and data:
            self._progress(len(data))
        return data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass(frozen=True)
class Sharing:
    """How a streamed layer shares the CPUs (:mod:`..speed.cpushare`): the critical (largest) one takes no slot and
    gives its reserved CPU back when it ends; the others take a slot per chunk."""

    share: CpuShare
    critical: bool


class _HashingWriter:
    """Writes to ``out`` and hashes the bytes (the uncompressed tar, for a diff_id check)."""

    def __init__(self, out: BinaryIO, digest: str | None, growing: Growing | None = None) -> None:
        self.out, self.growing = out, growing
        self.sha = hasher(parse_digest(digest)) if digest else None

    def write(self, data: bytes) -> int:
        if self.sha is not None:
            self.sha.update(data)
        view = memoryview(data)
        while view:  # unbuffered: what ``growing`` is told is on disk, for the precompressor to read
            view = view[self.out.write(view):]
        if self.growing is not None:
            self.growing.advance(len(data))
        return len(data)


def _check(got: object, expected: str | None, what: str, kind: str) -> None:
    if expected is None or got is None:
        return
    value = f"{parse_digest(expected).algorithm}:{got.hexdigest()}"  # type: ignore[attr-defined]
    if value != expected:
        raise IntegrityError(f"{what}: the layer does not match its {kind} {expected} (got {value})",
                             hint="the image is corrupt or was altered; nothing was written")


def _verify_in_place(blob: LayerBlob, progress: Callable[[int], None] | None) -> None:
    """An uncompressed layer used where it lies: its bytes are both the blob and the tar, so they must hash
    to the blob's digest and to its diff_id, whichever are known."""
    checks = [(d, kind) for d, kind in ((blob.digest, "digest"), (blob.diff_id, "diff_id")) if d]
    hashes = {parse_digest(d, blob.what).algorithm: hasher(parse_digest(d, blob.what)) for d, _ in checks}
    reader = _Hashing(blob, None, progress)
    try:
        while data := reader.read(CHUNK):
            for h in hashes.values():
                h.update(data)
    finally:
        reader.close()
    for expected, kind in checks:
        _check(hashes[parse_digest(expected).algorithm], expected, blob.what, kind)


def spool_path(workdir: Path, number: int) -> Path:
    return workdir / f"layer-{number}.tar"


def prepare(blob: LayerBlob, workdir: Path, number: int, progress: Callable[[int], None] | None = None,
            growing: Growing | None = None, sharing: Sharing | None = None) -> LayerTar:
    """``blob`` as a verified, uncompressed tar range, decompressing into ``workdir`` when it is compressed;
    ``growing`` learns how much of a streamed layer's spool is written (see :mod:`..squashfs.precompress`)."""
    if blob.chunks is not None:
        try:
            return _streamed(blob, spool_path(workdir, number), progress, growing, sharing)
        except (ConvertError, IntegrityError) as err:  # the engine's save is the reference
            if blob.fallback is None:
                raise
            log.info("%s: %s; reading it from the engine's save", blob.what, err.message)
            return prepare(blob.fallback(), workdir, number, progress)
    head = _head(blob)
    if not head.startswith((GZIP_MAGIC, ZSTD_MAGIC)):
        if head.startswith((XZ_MAGIC, BZIP2_MAGIC)):
            raise ConvertError(f"{blob.what}: xz/bzip2 layers are not supported",
                               hint="OCI layers are tar, tar+gzip or tar+zstd")
        _verify_in_place(blob, progress)
        return LayerTar(blob.path, blob.offset, blob.size, blob.what)
    spool = workdir / f"layer-{number}.tar"
    reader = _Hashing(blob, blob.digest, progress)
    try:
        with spool.open("wb") as raw_out:
            out = _HashingWriter(raw_out, blob.diff_id if blob.digest is None else None)
            if head.startswith(GZIP_MAGIC):
                _gunzip(reader, out, blob.what)
            else:
                _unzstd(reader, out, blob.what)
        _check(reader.sha, blob.digest, blob.what, "digest")
        _check(out.sha, blob.diff_id if blob.digest is None else None, blob.what, "diff_id")
    except BaseException:
        reader.close()
        spool.unlink(missing_ok=True)
        raise
    reader.close()
    return LayerTar(spool, 0, spool.stat().st_size, blob.what)


class _Chunks:
    """``read(n)`` over a layer that arrives as chunks (a registry download, an engine's storage), hashing what
    passes through for a check against the blob's digest; ``head`` is what the compression is sniffed from."""

    def __init__(self, chunks: Iterator[bytes], blob: LayerBlob, progress: Callable[[int], None] | None,
                 share: CpuShare | None = None) -> None:
        self._chunks, self._buf = chunks, memoryview(b"")
        self._share, self._holding = share, False
        self.sha = hasher(parse_digest(blob.digest, blob.what)) if blob.digest else None
        self._progress = progress
        while len(self._buf) < 6 and (more := next(self._chunks, b"")):
            self._buf = memoryview(bytes(self._buf) + more)
        self.head = bytes(self._buf[:6])

    def read(self, n: int = -1) -> bytes:
        if self._holding:  # the caller's work on the last piece is done: the slot goes to the next in line
            self._holding = False
            self._share.release()  # type: ignore[union-attr]
        if not self._buf:
            self._buf = memoryview(next(self._chunks, b""))
        if self._share is not None and self._buf:
            self._share.acquire()  # held while the caller decompresses and writes this piece
            self._holding = True
        n = n if n and n > 0 else CHUNK
        data, self._buf = self._buf[:n], self._buf[n:]
        if self.sha is not None:
            self.sha.update(data)
        if self._progress and data:
            self._progress(len(data))
        whole = data.obj if isinstance(data.obj, bytes) and len(data) == len(data.obj) else None
        return whole if whole is not None else bytes(data)  # a whole chunk is handed on without a copy

    def close(self) -> None:
        if self._holding:
            self._holding = False
            self._share.release()  # type: ignore[union-attr]
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()  # a generator: its downloads stop


def _streamed(blob: LayerBlob, spool: Path, progress: Callable[[int], None] | None,
              growing: Growing | None = None, sharing: Sharing | None = None) -> LayerTar:
    """A layer whose bytes come as chunks, decompressed (gzip, zstd) or copied into ``spool`` as they arrive,
    and checked against its digest (the compressed bytes) or, without one, its diff_id (the tar)."""
    if blob.chunks is None or (blob.digest is None and blob.diff_id is None):
        raise ConvertError(f"{blob.what}: a layer read as a stream needs its digest or its diff_id")
    share = sharing.share if sharing is not None and not sharing.critical else None
    reader = _Chunks(blob.chunks(), blob, progress, share)
    ok = False
    try:
        with spool.open("wb", buffering=0) as raw_out:
            out = _HashingWriter(raw_out, blob.diff_id if blob.digest is None else None, growing)
            try:
                _expand(reader, out, blob.what)
            except ConvertError:
                # Corrupt data in a blob that has a digest: read the rest, so that an altered blob is named as
                # such (exit 4), not as a decompression error.
                while reader.read(CHUNK):
                    pass
                _check(reader.sha, blob.digest, blob.what, "digest")
                raise
            while reader.read(CHUNK):  # whatever follows the compressed data counts for the digest too
                pass
        _check(reader.sha, blob.digest, blob.what, "digest")
        _check(out.sha, blob.diff_id if blob.digest is None else None, blob.what, "diff_id")
        ok = True
    except BaseException:
        spool.unlink(missing_ok=True)
        raise
    finally:
        reader.close()
        if growing is not None:
            growing.finish(ok)
        if sharing is not None and sharing.critical:
            sharing.share.unreserve()
    return LayerTar(spool, 0, spool.stat().st_size, blob.what)


def _expand(reader: _Chunks, out: _HashingWriter, what: str) -> None:
    """Decompress (gzip, zstd) or copy the layer from ``reader`` into ``out``."""
    if reader.head.startswith(GZIP_MAGIC):
        _gunzip(reader, out, what)
    elif reader.head.startswith(ZSTD_MAGIC):
        _unzstd(reader, out, what)
    elif reader.head.startswith((XZ_MAGIC, BZIP2_MAGIC)):
        raise ConvertError(f"{what}: xz/bzip2 layers are not supported", hint="OCI layers are tar, tar+gzip or tar+zstd")
    else:
        while data := reader.read(CHUNK):
            out.write(data)


def prepare_all(blobs: Sequence[LayerBlob], workdir: Path,
                progress: Callable[[int], None] | None = None) -> list[LayerTar]:
    """:func:`prepare` for every layer, compressed ones decompressed concurrently; the result keeps layer order."""
    if len(blobs) <= 1:
        return [prepare(b, workdir, n, progress) for n, b in enumerate(blobs, 1)]
    with ThreadPoolExecutor(max_workers=min(len(blobs), os.cpu_count() or 1)) as pool:
        futures = [pool.submit(prepare, b, workdir, n, progress) for n, b in enumerate(blobs, 1)]
        return [f.result() for f in futures]


def _gunzip(reader: _Hashing | _Chunks, out: _HashingWriter, what: str) -> None:
    """Decompress at most CHUNK bytes per call: a layer of zeros that expands a thousandfold (a "gzip bomb")
    costs one CHUNK of memory, not its whole expansion."""
    decomp = gzip_codec.decompressobj(wbits=31)
    started = False  # the current member has received data
    try:
        while chunk := reader.read(CHUNK):
            while chunk:
                started = True
                out.write(decomp.decompress(chunk, CHUNK))
                chunk = decomp.unconsumed_tail
                if decomp.eof:
                    chunk = decomp.unused_data  # concatenated gzip members
                    decomp = gzip_codec.decompressobj(wbits=31)
                    started = False
        out.write(decomp.flush())
    except (zlib.error, gzip_codec.error) as err:
        raise ConvertError(f"{what}: corrupt gzip data: {err}") from err
    if started and not decomp.eof:
        raise ConvertError(f"{what}: the gzip data ends early (truncated download or file)")


class _AsBytes:
    """``read`` as bytes: zstandard's ``copy_stream`` takes nothing else."""

    def __init__(self, reader: _Hashing | _Chunks) -> None:
        self._reader = reader

    def read(self, n: int = -1) -> bytes:
        data = self._reader.read(n)
        return data if isinstance(data, bytes) else bytes(data)


def _unzstd(reader: _Hashing | _Chunks, out: _HashingWriter, what: str) -> None:
    import zstandard

    try:
        # copy_stream only calls read() on its source and write() on its destination
        zstandard.ZstdDecompressor().copy_stream(_AsBytes(reader), out,  # type: ignore[arg-type]
                                                 read_size=CHUNK, write_size=CHUNK)
    except zstandard.ZstdError as err:
        raise ConvertError(f"{what}: corrupt zstd data: {err}") from err
