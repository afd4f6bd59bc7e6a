"""OCI image layouts inside a tar (``oci-archive:PATH``), read in place: nothing is unpacked.

The tar is indexed once (member name -> data offset and size); a blob is then a byte range of the tar file,
read through :class:`RangeFile`, which never reads past its member. As in a layout folder, a blob is looked up
only by a digest that passed :func:`.digest.parse_digest`, and only a plain regular member counts: a link, a
device or a sparse member standing where a blob should be is refused (exit 4), so a hostile archive cannot
point ckit at other bytes. :class:`OciArchive` offers the same reading methods as :class:`.layout.OciLayout`.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import Any

from ..config import limits
from ..errors import ConfigError, IntegrityError
from .digest import parse_digest
from .layout import Blobs, json_object

READ_SIZE = 1 << 20


class RangeFile:
    """``size`` bytes of ``path`` from ``offset``, as a seekable read-only file (positions are relative)."""

    def __init__(self, path: Path, offset: int, size: int) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close() / the with block
        self.offset, self.size, self._pos = offset, size, 0
        self._file.seek(offset)

    def read(self, amt: int | None = -1) -> bytes:
        left = self.size - self._pos
        want = left if amt is None or amt < 0 else min(amt, left)
        if want <= 0:
            return b""
        data = self._file.read(want)
        self._pos += len(data)
        return data

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self.size}[whence]
        self._pos = max(0, min(base + pos, self.size))
        self._file.seek(self.offset + self._pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RangeFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def normalise(name: str) -> str:
    """A member name without ``./`` and empty parts (``..`` keeps its place: it never matches a blob name)."""
    return "/".join(part for part in name.split("/") if part not in ("", "."))


class TarIndex:
    """Member name -> TarInfo of a tar file on disk (the last member of a name wins, as when extracting)."""

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what = Path(path), what
        if not self.path.is_file():
            raise ConfigError(f"{what}: {path} is not a file")
        self.members: dict[str, tarfile.TarInfo] = {}
        try:
            with tarfile.open(self.path, "r:") as tar:
                for member in tar:
                    self.members[normalise(member.name)] = member
        except (tarfile.TarError, OSError, ValueError) as err:  # ValueError: a negative base-256 size
            raise ConfigError(f"{what}: {path} is not a readable tar archive ({err})") from err

    def regular(self, name: str, role: str) -> tarfile.TarInfo:
        member = self.members.get(name)
        if member is None:
            raise ConfigError(f"{self.what}: the archive has no {role} ({name})")
        if not member.isreg() or member.issparse():
            raise IntegrityError(f"{self.what}: {name} is not a plain file in the archive",
                                 hint="links, devices and sparse members cannot stand for a blob")
        return member

    def open(self, member: tarfile.TarInfo) -> RangeFile:
        return RangeFile(self.path, member.offset_data, member.size)

    def read(self, name: str, role: str, limit: int) -> bytes:
        member = self.regular(name, role)
        if member.size > limit:
            raise IntegrityError(f"{self.what}: {name} is {member.size} bytes, more than the {limit} ckit reads")
        with self.open(member) as handle:
            return handle.read()


class OciArchive(Blobs):
    """An OCI image layout stored in a tar file; ``what`` is how messages name it (``oci-archive:x.tar``)."""

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what = Path(path), what
        self.tar = TarIndex(self.path, what)
        if "oci-layout" not in self.tar.members or "index.json" not in self.tar.members:
            raise ConfigError(f"{what}: {path} holds no OCI image layout (no oci-layout/index.json)",
                              hint="write one with `podman save --format oci-archive` or `skopeo copy … oci-archive:FILE`")

    def index(self) -> dict[str, Any]:
        data = self.tar.read("index.json", "index.json", limits.size("manifest_size"))
        return json_object(data, f"{self.what}: index.json")

    def _member(self, digest: str) -> tarfile.TarInfo:
        parsed = parse_digest(digest, f"{self.what}: blob")
        return self.tar.regular(f"blobs/{parsed.algorithm}/{parsed.encoded}", f"blob {digest}")

    def blob_range(self, digest: str) -> tuple[Path, int, int]:
        """Where the blob's bytes lie: (the tar file, offset, size)."""
        member = self._member(digest)
        return self.path, member.offset_data, member.size

    def open_blob(self, digest: str) -> RangeFile:
        return self.tar.open(self._member(digest))

    def blob_size(self, digest: str) -> int:
        return self._member(digest).size
