"""File-like helpers for blob uploads: a length-limited body with progress, and a file hashed as it is sent.

The verifying reader for downloads is :class:`buildkit.oci.digest.VerifyingReader`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import BinaryIO, Protocol

from ...errors import IntegrityError

READ_SIZE = 1 << 20


class _Readable(Protocol):
    def read(self, amt: int = ..., /) -> bytes: ...


class LimitedReader:
    """At most ``size`` bytes of ``stream`` as a request body, reporting progress as they are sent."""

    def __init__(self, stream: _Readable, size: int, progress: Callable[[int], None] | None = None) -> None:
        self.stream = stream
        self.remaining = size
        self.size = size
        self.progress = progress

    def __len__(self) -> int:
        return self.size

    def read(self, amt: int = -1) -> bytes:
        """Up to ``amt`` bytes, but never less than READ_SIZE: http.client asks for 8-16 KiB blocks, and
        returning 1 MiB at a time saves most of the per-block Python work on large uploads."""
        if self.remaining <= 0:
            return b""
        want = self.remaining if amt is None or amt < 0 else min(max(amt, READ_SIZE), self.remaining)
        data = self.stream.read(want)
        self.remaining -= len(data)
        if self.progress and data:
            self.progress(len(data))
        return data


class HashingFile:
    """A seekable file that hashes its bytes the first time each is read, in file order.

    An upload that resends a range (a resumed or restarted chunk) reads bytes again without hashing
    them twice, so the digest is that of the file whatever the upload went through.
    """

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.hashed = 0
        self._hash = hashlib.sha256()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.stream.seek(offset, whence)

    def tell(self) -> int:
        return self.stream.tell()

    def seekable(self) -> bool:
        return True

    def read(self, amt: int = -1) -> bytes:
        start = self.stream.tell()
        if start > self.hashed:
            raise IntegrityError(f"upload skipped bytes {self.hashed}-{start - 1} of the file it hashes")
        data = self.stream.read(amt)
        end = start + len(data)
        if end > self.hashed:
            self._hash.update(memoryview(data)[self.hashed - start:])
            self.hashed = end
        return data

    def digest(self, size: int) -> str:
        if self.hashed != size:
            raise IntegrityError(f"the upload read {self.hashed} of the file's {size} bytes",
                                 hint="the file changed while it was being pushed; push it again")
        return "sha256:" + self._hash.hexdigest()
