"""``docker-archive:PATH[:REF]``: a ``docker save`` tar, read in place (also what an engine's save is spooled
into, :mod:`.docker_daemon`). Each layer is a member of the tar, verified against the config's ``rootfs.diff_ids``.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...config import limits
from ...errors import ConfigError, ConvertError, IntegrityError
from ...oci.digest import parse_digest
from ...oci.docker_manifest import ArchiveImage, archive_images
from ...oci.layout import json_object
from .base import Identity, LayerBlob, Materialized, Reader, Source, sha256_bytes


class DockerArchive:
    """An indexed docker-archive tar on disk: member name → (offset, size), read by seeking."""

    def __init__(self, path: Path, ref: str | None, what: str) -> None:
        self.path, self.ref, self.what = path, ref, what
        if not path.is_file():
            raise ConfigError(f"{what}: {path} is not a file", hint="give the path of a `docker save` archive")
        self.members: dict[str, tarfile.TarInfo] = {}
        try:
            with tarfile.open(path, "r:") as tar:
                for member in tar:
                    self.members[_normalise_archive_name(member.name)] = member
        except (tarfile.TarError, OSError, ValueError) as err:  # a negative base-256 size: a seek before the start
            raise ConvertError(f"{what}: {path} is not a readable tar archive: {err}") from err
        self.entry = self._select(archive_images(self.read("manifest.json", limits.size("config_size")), what))

    def _member(self, name: str, depth: int = 0) -> tarfile.TarInfo:
        member = self.members.get(name)
        if member is None:
            raise ConvertError(f"{self.what}: the archive has no member {name!r}")
        if member.issym() or member.islnk():
            if depth > 8:
                raise ConvertError(f"{self.what}: member {name!r} is a link loop")
            target = member.linkname if member.islnk() else str(Path(name).parent / member.linkname)
            return self._member(_normalise_archive_name(target), depth + 1)
        if not member.isfile():
            raise ConvertError(f"{self.what}: member {name!r} is not a file")
        return member

    def read(self, name: str, limit: int) -> bytes:
        """A small member (manifest.json, the config), refused when it is larger than ``limit``."""
        member = self._member(name)
        if member.size > limit:
            raise IntegrityError(f"{self.what}: member {name!r} is {member.size} bytes, more than the {limit} "
                                 "ckit reads for it", hint="the archive is malformed or hostile")
        with self.path.open("rb") as f:
            f.seek(member.offset_data)
            return f.read(member.size)

    def _select(self, images: list[ArchiveImage]) -> ArchiveImage:
        if self.ref is None:
            if len(images) > 1:
                tags = [t for image in images for t in image.repo_tags]
                raise ConfigError(f"{self.what}: the archive holds {len(images)} images",
                                  hint="name one: docker-archive:PATH:REF, REF one of " + ", ".join(tags))
            return images[0]
        for image in images:
            if self.ref in image.repo_tags:
                return image
        raise ConfigError(f"{self.what}: no image tagged {self.ref!r} in the archive")

    def identify(self) -> Identity:
        config = self.read(self.entry.config, limits.size("config_size"))
        return Identity(config, sha256_bytes(config))

    def layers(self) -> list[LayerBlob]:
        """The layers, each to be verified against the config's ``rootfs.diff_ids`` (an archive member has
        no digest of its own; the config is what the image ID names)."""
        names = self.entry.layers
        config = self.identify().config or b""
        ids = diff_ids(json_object(config, f"{self.what}: image config"), len(names), self.what)
        blobs = []
        for number, (name, diff_id) in enumerate(zip(names, ids, strict=True), start=1):
            member = self._member(name)
            blobs.append(LayerBlob(self.path, member.offset_data, member.size, f"layer {number} ({name})",
                                   diff_id=diff_id))
        return blobs


def diff_ids(config: dict[str, Any], count: int, what: str) -> list[str]:
    """The config's ``rootfs.diff_ids``, checked to be ``count`` valid digests."""
    rootfs = config.get("rootfs")
    ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(ids, list) or len(ids) != count:
        found = len(ids) if isinstance(ids, list) else "no"
        raise IntegrityError(f"{what}: the image config lists {found} rootfs.diff_ids for {count} layers",
                             hint="the archive is malformed or was altered; write it again with `docker save`")
    return [str(parse_digest(d, f"{what}: rootfs.diff_ids[{n}]")) for n, d in enumerate(ids)]


def _normalise_archive_name(name: str) -> str:
    parts: list[str] = []
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/".join(parts)


class DockerArchiveSource(Source):
    def __init__(self, text: str, path: Path, ref: str | None) -> None:
        self.text, self.path, self.ref = text, path, ref
        self.image_ref = ref or path.name
        self._archive: DockerArchive | None = None

    @property
    def archive(self) -> DockerArchive:
        if self._archive is None:
            self._archive = DockerArchive(self.path, self.ref, self.text)
            if self.ref is None:
                tags = self._archive.entry.repo_tags
                self.image_ref = tags[0] if tags else self.path.name
        return self._archive

    def identify(self) -> Identity:
        return self.archive.identify()

    def materialize(self, workdir: Path, progress: Callable[[int], None] | None = None) -> Materialized:
        return Materialized(self.archive.identify().config or b"", self.archive.layers())



READERS: dict[str, Reader] = {
    "docker-archive": lambda spec: DockerArchiveSource(spec.text, spec.path or Path(), spec.ref)}
