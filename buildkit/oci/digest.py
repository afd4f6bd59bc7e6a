"""Content digests (``ALGORITHM:ENCODED``): parsed strictly, computed and verified with one set of rules.

The OCI image spec registers ``sha256`` (64 lowercase hex digits) and ``sha512`` (128); ``blake3`` (64) is
verified when the ``blake3`` package is installed. A digest string from an image, a layout or a registry is
untrusted input: it must match the grammar exactly before it names a file or a URL (``sha256:../../x`` never
becomes a path), and content counts only once its bytes hash to it.

:func:`parse_digest` is the one parser of the grammar; everything else calls it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import IntegrityError

# algorithm -> length of the lowercase hex encoding
ALGORITHMS = {"sha256": 64, "sha512": 128, "blake3": 64}
_GRAMMAR = re.compile(r"^([a-z0-9]+(?:[+._-][a-z0-9]+)*):([a-zA-Z0-9=_-]+)$")
READ_SIZE = 1 << 20


class _Readable(Protocol):
    def read(self, amt: int | None = ..., /) -> bytes: ...


@dataclass(frozen=True)
class Digest:
    algorithm: str
    encoded: str

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.encoded}"


def parse_digest(text: object, what: str = "digest") -> Digest:
    """``text`` as a digest ckit can verify; IntegrityError (exit 4) for anything else."""
    if not isinstance(text, str):
        raise IntegrityError(f"{what}: the digest is not a string ({type(text).__name__})",
                             hint="the image or layout is malformed or was altered")
    match = _GRAMMAR.fullmatch(text)
    if not match:
        raise IntegrityError(f"{what}: invalid digest {text[:80]!r}",
                             hint="a digest is ALGORITHM:HEX, e.g. sha256: and 64 lowercase hex digits")
    algorithm, encoded = match.groups()
    length = ALGORITHMS.get(algorithm)
    if length is None:
        raise IntegrityError(f"{what}: digest algorithm {algorithm!r} is not one ckit can verify",
                             hint="ckit verifies " + ", ".join(ALGORITHMS))
    if len(encoded) != length or not all(c in "0123456789abcdef" for c in encoded):
        raise IntegrityError(f"{what}: a {algorithm} digest is {length} lowercase hex digits, not {encoded[:80]!r}")
    return Digest(algorithm, encoded)


def is_valid(text: object) -> bool:
    try:
        parse_digest(text)
    except IntegrityError:
        return False
    return True


def hasher(digest: Digest) -> Any:
    """A fresh hash object for ``digest``'s algorithm."""
    if digest.algorithm == "blake3":
        try:
            import blake3  # type: ignore[import-not-found]  # optional: pip install blake3
        except ImportError as err:
            raise IntegrityError(f"cannot verify {digest}: the blake3 package is not installed",
                                 hint="pip install blake3") from err
        return blake3.blake3()
    return hashlib.new(digest.algorithm)


def of_bytes(data: bytes, algorithm: str = "sha256") -> str:
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


def verify_bytes(data: bytes, expected: str, what: str) -> None:
    """IntegrityError unless ``data`` hashes to ``expected``."""
    want = parse_digest(expected, what)
    h = hasher(want)
    h.update(data)
    if h.hexdigest() != want.encoded:
        raise IntegrityError(f"{what} does not match its digest {expected} (got {want.algorithm}:{h.hexdigest()})",
                             hint="the content is corrupt or was altered; nothing was written")


class VerifyingReader:
    """Reads from ``raw`` and checks the digest (and the size, when known) at the end of the data.

    Reading more than ``size`` bytes fails at once, so a lying or endless source never fills memory or disk.
    """

    def __init__(self, raw: _Readable, digest: str, size: int | None, what: str) -> None:
        self.expected = parse_digest(digest, what)
        self.raw = raw
        self.digest = digest
        self.size = size
        self.what = what
        self.read_bytes = 0
        self.verified = False
        self._hash = hasher(self.expected)

    def read(self, amt: int | None = -1) -> bytes:
        if self.verified or amt == 0:
            return b""
        whole = amt is None or amt < 0
        data = self.raw.read(None if whole else amt)
        if not data:
            self._check()
            return b""
        self._hash.update(data)
        self.read_bytes += len(data)
        if self.size is not None and self.read_bytes > self.size:
            raise IntegrityError(f"{self.what} is larger than the {self.size} bytes its descriptor says",
                                 hint="the content is corrupt or was altered; nothing was written")
        if whole:
            self._check()
        return data

    def drain(self) -> None:
        while self.read(READ_SIZE):
            pass

    def _check(self) -> None:
        got = self._hash.hexdigest()
        if got != self.expected.encoded:
            raise IntegrityError(f"{self.what} does not match its digest (got {self.expected.algorithm}:{got})",
                                 hint="the content is corrupt or was altered; nothing was written")
        if self.size is not None and self.read_bytes != self.size:
            raise IntegrityError(f"{self.what} has {self.read_bytes} bytes, its descriptor says {self.size}")
        self.verified = True
