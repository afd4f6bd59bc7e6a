"""OCI image layouts (``oci:DIR``): the index, and blobs opened only as regular files inside the layout.

A blob's path comes only from a digest that passed :func:`.digest.parse`, and the file must be a regular file
reached through real directories: a symlink in a layout could name any file on the host, so it is refused
(``O_NOFOLLOW`` on the blob, ``lstat`` on the folders above it). Small blobs (index, manifests, configs) are read
with a size cap and verified before they are parsed.
"""

from __future__ import annotations

import abc
import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from ..config import limits
from ..config.jsondoc import parse as parse_json
from ..errors import ConfigError, IntegrityError
from .digest import parse_digest, verify_bytes
from .labels import REF_NAME


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    annotations: dict[str, str] = field(default_factory=dict)
    platform: dict[str, Any] = field(default_factory=dict)

    @property
    def ref_name(self) -> str | None:
        return self.annotations.get(REF_NAME)


def descriptor(obj: object, what: str) -> Descriptor:
    """A content descriptor checked for types and a verifiable digest (IntegrityError naming ``what``)."""
    if not isinstance(obj, dict):
        raise IntegrityError(f"{what}: a descriptor must be a JSON object, not {type(obj).__name__}")
    media_type, size = obj.get("mediaType", ""), obj.get("size")
    annotations, platform = obj.get("annotations") or {}, obj.get("platform") or {}
    if not isinstance(media_type, str):
        raise IntegrityError(f"{what}: mediaType must be a string")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise IntegrityError(f"{what}: size must be a non-negative integer, not {size!r:.40}")
    if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
        raise IntegrityError(f"{what}: annotations must map strings to strings")
    if not isinstance(platform, dict):
        raise IntegrityError(f"{what}: platform must be a JSON object")
    digest = str(parse_digest(obj.get("digest"), what))
    return Descriptor(media_type, digest, size, dict(annotations), dict(platform))


def json_object(data: bytes, what: str) -> dict[str, Any]:
    """``data`` as a JSON object; a clear error for anything else (including nesting deep enough to recurse)."""
    found: dict[str, Any] = parse_json(data, what, error=IntegrityError)  # parse checks it is an object
    return found


def read_capped(handle: Readable, limit: int, what: str) -> bytes:
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise IntegrityError(f"{what} is larger than {limit} bytes", hint="the content is malformed or hostile")
    return data


def open_regular(path: Path, what: str) -> BinaryIO:
    """``path`` opened for reading only if it is a regular file and not a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block
    except FileNotFoundError as err:
        raise ConfigError(f"{what}: {path} is missing") from err
    except OSError as err:  # ELOOP: a symlink
        raise IntegrityError(f"{what}: {path} is not a regular file ({err.strerror})",
                             hint="blobs must be files inside the layout; copy it with `skopeo copy`") from err
    handle = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        handle.close()
        raise IntegrityError(f"{what}: {path} is not a regular file",
                             hint="blobs must be files inside the layout; copy it with `skopeo copy`")
    return handle


class Readable(Protocol):
    """A blob opened for reading: a file, or a range of a tar (:class:`~buildkit.oci.archive.RangeFile`)."""

    def read(self, amt: int = -1, /) -> bytes: ...
    def close(self) -> None: ...


class Blobs(abc.ABC):
    """What a layout on disk and one in a tar (:class:`~buildkit.oci.archive.OciArchive`) share: the manifests of
    the index and a small blob, read capped and verified, the same way for both."""

    what: str

    @abc.abstractmethod
    def index(self) -> dict[str, Any]:
        """The parsed ``index.json``."""

    @abc.abstractmethod
    def open_blob(self, digest: str) -> Readable:
        """The blob's bytes, for reading."""

    def manifests(self) -> list[Descriptor]:
        return index_manifests(self.index(), self.what)

    def read_blob(self, desc: Descriptor, limit: int | None = None) -> bytes:
        """A small blob, size-capped (default: the manifest limit) and verified against its digest (and its
        descriptor's size)."""
        what = f"{self.what}: blob {desc.digest}"
        limit = limit if limit is not None else limits.size("manifest_size")
        if desc.size > limit:
            raise IntegrityError(f"{what} is {desc.size} bytes, more than the {limit} ckit reads for it")
        with contextlib.closing(self.open_blob(desc.digest)) as handle:
            data = read_capped(handle, limit, what)
        if len(data) != desc.size:
            raise IntegrityError(f"{what} has {len(data)} bytes, its descriptor says {desc.size}")
        verify_bytes(data, desc.digest, what)
        return data


class OciLayout(Blobs):
    """An OCI image layout on disk; ``what`` is how messages name it (e.g. ``oci:./layout``)."""

    def __init__(self, root: Path, what: str) -> None:
        self.root, self.what = Path(root), what
        if not (self.root / "oci-layout").is_file() or not (self.root / "index.json").is_file():
            raise ConfigError(f"{what}: {self.root} is not an OCI image layout (no oci-layout/index.json)",
                              hint="write one with `skopeo copy … oci:DIR:TAG`")

    def index(self) -> dict[str, Any]:
        with open_regular(self.root / "index.json", self.what) as handle:
            data = read_capped(handle, limits.size("manifest_size"), f"{self.what}: index.json")
        return json_object(data, f"{self.what}: index.json")

    def blob_path(self, digest: str) -> Path:
        """The path of a blob named by a valid digest, under real (non-symlink) folders of the layout."""
        parsed = parse_digest(digest, f"{self.what}: blob")
        folder = self.root / "blobs"
        for part in (folder, folder / parsed.algorithm):
            try:
                mode = os.lstat(part).st_mode
            except FileNotFoundError as err:
                raise ConfigError(f"{self.what}: blob {digest} is missing from the layout") from err
            if not stat.S_ISDIR(mode):
                raise IntegrityError(f"{self.what}: {part} is not a directory of the layout",
                                     hint="blobs must be files inside the layout; copy it with `skopeo copy`")
        return folder / parsed.algorithm / parsed.encoded

    def open_blob(self, digest: str) -> BinaryIO:
        return open_regular(self.blob_path(digest), f"{self.what}: blob {digest}")

    def blob_size(self, digest: str) -> int:
        with self.open_blob(digest) as handle:
            return os.fstat(handle.fileno()).st_size

    def blob_range(self, digest: str) -> tuple[Path, int, int]:
        """Where the blob's bytes lie: (its file, 0, size); the same method reads an ``oci-archive:`` tar."""
        return self.blob_path(digest), 0, self.blob_size(digest)

def index_manifests(index: dict[str, Any], what: str) -> list[Descriptor]:
    """The typed ``manifests`` of an OCI ``index.json`` (a layout's or an oci-archive's)."""
    entries = index.get("manifests") or []
    if not isinstance(entries, list):
        raise IntegrityError(f"{what}: index.json manifests must be a list")
    return [descriptor(e, f"{what}: index.json manifests[{n}]") for n, e in enumerate(entries)]
