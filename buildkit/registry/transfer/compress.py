"""Deterministic parallel gzip for the layers ckit pushes compressed (``docker save`` layers are plain tar).

The same input gives the same bytes, so the same digest, every time: a repeat push can ask the registry for the
blob by digest and send nothing. That rules out what makes ordinary gzip vary: the header is fixed (no file
name, mtime 0, OS "unknown"), the level is fixed, and the stream is cut into fixed :data:`BLOCK` pieces that are
compressed independently (so the thread count does not change the output), each primed with the last 32 KiB of
the piece before it (so the ratio stays that of one stream) and ended with a sync flush, as pigz does. The
pieces are compressed by ISA-L (``isal``, which releases the GIL: one thread per CPU runs in parallel), or by
zlib where ISA-L is not available; :data:`METHOD` names which, and is part of every cache key built on the result.

While the bytes go through, the uncompressed stream is hashed (sha256: the layer's ``diff_id``, which the caller
checks against the image config) and so is the compressed output (its blob digest).
"""

from __future__ import annotations

import hashlib
import os
import struct
import types
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from ...errors import IntegrityError

_deflate: types.ModuleType
try:  # ISA-L on x86_64/aarch64 (a dependency there); zlib elsewhere
    from isal import isal_zlib as _deflate

    # ISA-L's best level; its memLevel 3 gives ~1.5% smaller output than the default 8 on image layers, at the
    # same speed (measured on Debian rootfs and /usr/lib trees: 133.3 vs 134.7 MB of 355 MB)
    METHOD, LEVEL, MEM_LEVEL = "gzip-isal3m3-b4m-v1", 3, 3
except ImportError:  # pragma: no cover - exercised only where isal has no wheel
    _deflate = zlib
    METHOD, LEVEL, MEM_LEVEL = "gzip-zlib6-b4m-v1", 6, 8

BLOCK = 4 << 20  # bytes per independently compressed piece
WINDOW = 32 << 10  # deflate's window: the priming dictionary of each piece
HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # gzip magic, deflate, no flags, mtime 0, XFL 0, OS unknown


class _Readable(Protocol):
    def read(self, amt: int = ..., /) -> bytes: ...


@dataclass(frozen=True)
class Compressed:
    digest: str  # sha256 of the gzip stream written
    size: int  # its length
    diff_id: str  # sha256 of the uncompressed bytes read


def _piece(data: bytes, primer: bytes, last: bool) -> bytes:
    engine = _deflate.compressobj(LEVEL, zlib.DEFLATED, -15, MEM_LEVEL, zdict=primer) if primer else \
        _deflate.compressobj(LEVEL, zlib.DEFLATED, -15, MEM_LEVEL)
    return engine.compress(data) + engine.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def workers() -> int:
    return max(1, min(os.cpu_count() or 1, 32))


def gzip_stream(src: _Readable, size: int, out: BinaryIO, *, what: str, threads: int | None = None,
                progress: Callable[[int], None] | None = None) -> Compressed:
    """Compress exactly ``size`` bytes of ``src`` into ``out`` (gzip); IntegrityError if ``src`` ends early."""
    raw_hash, gz_hash = hashlib.sha256(), hashlib.sha256()
    crc, written = 0, 0

    def emit(chunk: bytes) -> None:
        nonlocal written
        out.write(chunk)
        gz_hash.update(chunk)
        written += len(chunk)

    emit(HEADER)
    pending: deque[Future[bytes]] = deque()
    count = threads or workers()
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="ckit-gzip") as pool:
        done, primer = 0, b""
        while True:
            data = src.read(min(BLOCK, size - done)) if done < size else b""
            if done < size and not data:
                raise IntegrityError(f"{what} ended after {done} of its {size} bytes",
                                     hint="the source changed or is truncated; write it again")
            done += len(data)
            raw_hash.update(data)
            crc = _deflate.crc32(data, crc)
            last = done >= size
            pending.append(pool.submit(_piece, data, primer, last))
            primer = (primer + data)[-WINDOW:] if len(data) < WINDOW else data[-WINDOW:]
            if progress and data:
                progress(len(data))
            while len(pending) > 2 * count or (last and pending):
                emit(pending.popleft().result())
            if last:
                break
    emit(struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF))
    return Compressed("sha256:" + gz_hash.hexdigest(), written, "sha256:" + raw_hash.hexdigest())
