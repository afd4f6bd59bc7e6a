"""Layer blobs on their way to a registry: sent as the source holds them, or gzip-compressed first.

A layer the source already holds compressed (an OCI layout's ``tar+gzip`` or ``tar+zstd`` blob) goes up as it is,
under its own digest. A plain tar layer (every layer of a ``docker save`` archive) is compressed by
:mod:`.compress` into a spool file, its uncompressed bytes checked against the config's ``diff_id`` on the
way, then uploaded. Compression runs in the calling thread (it uses every CPU itself) while up to
:data:`UPLOADS` finished blobs upload in the background, so the next layer compresses while the last one is sent.

A repeat push sends nothing and compresses nothing: the blob digest a layer compressed to is remembered by
``diff_id`` (:func:`.known_digests.lookup_compressed`) and the registry is asked for it first.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from ...errors import IntegrityError, Interrupted
from ...oci.archive import RangeFile
from ...oci.digest import parse_digest
from ..distribution.client import RegistryClient
from ..distribution.streams import READ_SIZE
from . import known_digests
from .compress import METHOD, gzip_stream

log = logging.getLogger("ckit.registry")

UPLOADS = 3  # blobs uploading at once

Progress = Callable[[int], None]


@dataclass(frozen=True)
class LayerSource:
    """One layer as its source holds it: a byte range of a file (an archive member, a layout blob)."""

    path: Path
    offset: int
    size: int
    what: str  # how messages name it: "layer 2 of docker-archive:x.tar"
    compression: str  # "tar", "gzip", "zstd", or "opaque" (not an image layer: sent as it is)
    digest: str | None = None  # the stored blob's digest, when the source names one (OCI layouts)
    diff_id: str | None = None  # the uncompressed tar's digest (the config's rootfs.diff_ids)
    media_type: str | None = None  # as the source's manifest names it


@dataclass(frozen=True)
class Blob:
    """A blob as it is in the registry once pushed."""

    digest: str
    size: int
    compression: str
    changed: bool  # not the source's own bytes (compressed by ckit)


def sniff(path: Path, offset: int) -> str:
    """A layer's compression by its first bytes (archive members say nothing else)."""
    with RangeFile(path, offset, 4) as head:
        magic = head.read(4)
    if magic[:2] == b"\x1f\x8b":
        return "gzip"
    if magic == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return "tar"


class Uploader:
    """Blobs of one push into ``repo``: each digest is sent at most once, the bytes sent are counted."""

    def __init__(self, client: RegistryClient, repo: str, spool: Path, progress: Progress | None = None) -> None:
        self.client, self.repo, self.spool, self.progress = client, repo, spool, progress
        self.pool = ThreadPoolExecutor(max_workers=UPLOADS, thread_name_prefix="ckit-upload")
        self.started: dict[str, Future[int]] = {}
        self.lock = threading.Lock()
        self.count = 0
        self.stop = threading.Event()  # set on abort: uploads under way end at their next read

    def _advance(self, n: int) -> None:
        if self.progress:
            self.progress(n)

    def _send(self, digest: str, size: int, opener: Callable[[], object], report: bool,
              cleanup: Path | None = None) -> None:
        def run() -> int:
            try:
                with opener() as stream:  # type: ignore[attr-defined]
                    stoppable = cast(BinaryIO, _Stoppable(stream, self.stop))  # read and seek: what an upload uses
                    return self.client.upload_blob(self.repo, stoppable, digest, size,
                                                   progress=self._advance if report else None)
            finally:
                if cleanup is not None:
                    cleanup.unlink(missing_ok=True)
        with self.lock:
            if digest not in self.started:
                self.started[digest] = self.pool.submit(run)
                return
        if cleanup is not None:
            cleanup.unlink(missing_ok=True)
        if report:
            self._advance(size)

    def config(self, data: bytes, digest: str) -> None:
        import io

        self._send(digest, len(data), lambda: io.BytesIO(data), report=True)

    def layer(self, layer: LayerSource) -> Blob:
        """Start the layer's upload (compressing it first when it is plain tar); return its blob."""
        if layer.compression == "tar":
            return self._compressed(layer)
        digest = layer.digest or self._hash(layer)
        self._send(digest, layer.size, lambda: RangeFile(layer.path, layer.offset, layer.size), report=True)
        return Blob(digest, layer.size, layer.compression, changed=False)

    def _hash(self, layer: LayerSource) -> str:
        """The digest of a compressed archive member (its bytes are sent as they are), its uncompressed bytes
        checked against the config's ``diff_id`` on the same read."""
        h, raw = hashlib.sha256(), hashlib.sha256()
        inflate = _inflater(layer.compression)
        with RangeFile(layer.path, layer.offset, layer.size) as src:
            while chunk := src.read(READ_SIZE):
                h.update(chunk)
                if inflate is not None:
                    try:
                        raw.update(inflate(chunk))
                    except Exception as err:  # zlib.error, isal's error, zstandard.ZstdError alike  # noqa: BLE001
                        raise IntegrityError(f"{layer.what}: corrupt {layer.compression} data ({err})") from err
        if inflate is not None and layer.diff_id and "sha256:" + raw.hexdigest() != layer.diff_id:
            raise IntegrityError(f"{layer.what} does not match its diff_id {layer.diff_id} "
                                 f"(got sha256:{raw.hexdigest()})",
                                 hint="the image is corrupt or was altered; nothing was pushed for it")
        return "sha256:" + h.hexdigest()

    def _compressed(self, layer: LayerSource) -> Blob:
        expected = layer.diff_id or layer.digest
        if expected is not None and parse_digest(expected, layer.what).algorithm != "sha256":
            raise IntegrityError(f"{layer.what}: ckit compresses layers whose diff_id is a sha256 digest, "
                                 f"not {expected[:20]}…")
        known = known_digests.lookup_compressed(expected, METHOD) if expected else None
        if known is not None and self.client.blob_exists(self.repo, known[0]):
            log.debug("%s: compressed before as %s, which %s has", layer.what, known[0], self.client.host)
            self._advance(layer.size)
            return Blob(known[0], known[1], "gzip", changed=True)
        with self.lock:
            self.count += 1
            target = self.spool / f"layer-{self.count}.gz"
        try:
            with RangeFile(layer.path, layer.offset, layer.size) as src, open(target, "wb") as out:
                made = gzip_stream(src, layer.size, out, what=layer.what, progress=self._advance)
            if expected is not None and made.diff_id != expected:
                raise IntegrityError(f"{layer.what} does not match its diff_id {expected} (got {made.diff_id})",
                                     hint="the image is corrupt or was altered; nothing was pushed for it")
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        known_digests.remember_compressed(made.diff_id, METHOD, made.digest, made.size)
        self._send(made.digest, made.size, lambda: target.open("rb"), report=False, cleanup=target)
        return Blob(made.digest, made.size, "gzip", changed=True)

    def drain(self) -> int:
        """Wait for every upload started so far; return the bytes they sent. The first failure is raised."""
        return sum(future.result() for future in list(self.started.values()))

    def finish(self) -> int:
        """Wait for every upload and stop the workers; return the bytes sent."""
        try:
            return self.drain()
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> None:
        """Stop: queued uploads are dropped, running ones fail at their next read (Ctrl-C does not wait for
        gigabytes to finish uploading)."""
        self.stop.set()
        self.pool.shutdown(wait=True, cancel_futures=True)


def _inflater(compression: str) -> Callable[[bytes], bytes] | None:
    """A function turning successive compressed chunks into their uncompressed bytes (gzip members may be
    concatenated), or None for a compression ckit does not read."""
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress
    if compression != "gzip":
        return None
    try:
        from isal import isal_zlib as codec
    except ImportError:  # pragma: no cover - platforms without an isal wheel
        import zlib as codec  # type: ignore[no-redef]
    state = {"d": codec.decompressobj(wbits=31)}

    def inflate(chunk: bytes) -> bytes:
        out = []
        while chunk:
            out.append(state["d"].decompress(chunk))
            if not state["d"].eof:
                break
            chunk = state["d"].unused_data
            state["d"] = codec.decompressobj(wbits=31)
        return b"".join(out)
    return inflate


class _Stoppable:
    """A blob's stream that fails its next read once ``stop`` is set."""

    def __init__(self, stream: Any, stop: threading.Event) -> None:
        self.stream, self.stop = stream, stop

    def read(self, amt: int = -1) -> bytes:
        if self.stop.is_set():
            raise Interrupted("push stopped")
        return self.stream.read(amt)

    def seek(self, pos: int, whence: int = 0) -> int:
        return self.stream.seek(pos, whence)

    def tell(self) -> int:
        return self.stream.tell()

    def seekable(self) -> bool:
        return self.stream.seekable()
