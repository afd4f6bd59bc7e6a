"""Image sources: where a conversion reads an image's config and layers from.

SOURCE forms (as skopeo spells them): ``docker-daemon:REF``, ``docker-archive:PATH[:REF]``, ``oci:PATH[:TAG]``
and ``docker://REF``. Every source first *identifies* the image cheaply (config blob and its digest, the
cache key input) and only on a cache miss *materialises* its layers: each layer is then a byte range of a
file on disk (the archive itself, a blob of the layout, or a spooled download), possibly compressed.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import platform
import tarfile
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import limits
from ..daemon import Daemon, EngineAPIError, connect, short_error
from ..errors import ConfigError, ConvertError, IntegrityError
from ..oci.digest import parse_digest
from ..oci.docker_manifest import ArchiveImage, archive_images
from ..oci.layout import Descriptor, OciLayout, descriptor, json_object
from ..oci.sources import SourceSpec, parse_spec
from . import engine_storage

log = logging.getLogger("ckit.source")

SAVE_TIMEOUT = 600  # seconds the engine may stay silent during an image save

MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}


def host_arch() -> str:
    machine = platform.machine()
    return GO_ARCH.get(machine, machine)


def sha256_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class LayerBlob:
    """One layer as a byte range of a file (compressed or not: the flattener sniffs it)."""

    path: Path
    offset: int
    size: int
    what: str  # how messages name it, e.g. "layer 2 (sha256:ab12…)"
    digest: str | None = None  # the blob's own digest (OCI layout, registry), checked as it is read
    diff_id: str | None = None  # the uncompressed tar's digest from the config, for blobs without a digest
    # a layer from an engine's storage: the tar's bytes, and the same layer from a save if the storage fails
    chunks: Callable[[], Iterator[bytes]] | None = None
    fallback: Callable[[], LayerBlob] | None = None


@dataclass(frozen=True)
class Identity:
    config: bytes | None  # None when the source names the digest without handing out the blob
    digest: str  # sha256 of the config blob: the image ID


@dataclass(frozen=True)
class Materialized:
    config: bytes
    layers: list[LayerBlob]


class Source:
    """Base of the four sources: ``identify()`` is cheap, ``layers(workdir)`` may download or spool."""

    text: str  # the SOURCE as the user wrote it
    image_ref: str  # what deffile ``from:`` and Enroot's provenance line name

    def identify(self) -> Identity:
        raise ConvertError(f"{self.text}: this source cannot be read")  # overridden by every source

    def materialize(self, workdir: Path, progress: Callable[[int], None] | None = None) -> Materialized:
        """Config blob and layers, downloading or spooling into ``workdir`` where needed."""
        raise ConvertError(f"{self.text}: this source cannot be read")


Reader = Callable[[SourceSpec], "Source"]  # a SOURCE form's reader: the parsed SOURCE -> its Source


def parse_source(text: str, *, registry: Reader | None = None) -> Source:
    """The source named by ``text`` (the one SOURCE grammar, :mod:`buildkit.oci.sources`), or a ConfigError.
    ``registry`` reads ``docker://`` (:func:`buildkit.registry.source.reader`: the client is a layer above)."""
    spec = parse_spec(text)
    if spec.form == "docker":
        if registry is None:
            raise ConfigError(f"{text}: this command reads no registry", hint="give a local SOURCE")
        return registry(spec)
    return READERS[spec.form](spec)


def _oci_archive_source(spec: SourceSpec) -> Source:
    from .oci_archive_source import OciArchiveSource

    return OciArchiveSource(spec.text, spec.path or Path(), spec.ref)


def short(digest: str) -> str:
    return digest[:19] + "…" if len(digest) > 19 else digest


# --- docker-archive (also what a daemon save is spooled into) ------------------------------------------------
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


# --- docker-daemon -----------------------------------------------------------------------------------------
class DaemonSource(Source):
    """An image in the engine behind ``DOCKER_HOST`` (Docker or podman's service); ``daemon`` and ``inspected``
    when the caller has just asked the engine about it (``ckit build``'s cache check): not asked for again.

    The image ID is the config digest, so identifying needs no save. Materialising reads podman's layers where
    podman keeps them when it can (:mod:`.engine_storage`: no save, and only the layers a conversion needs),
    else spools the engine's save into the work dir (its ``manifest.json``, which lists the layer order, may
    come last, so a seekable copy is needed anyway)."""

    def __init__(self, text: str, ref: str, *, daemon: Daemon | None = None,
                 inspected: Mapping[str, Any] | None = None) -> None:
        self.text, self.ref, self.image_ref, self._daemon = text, ref, ref, daemon
        self._image: dict[str, Any] | None = dict(inspected) if daemon is not None and inspected else None
        self._saved: DockerArchive | None = None
        self._lock = threading.Lock()

    def _get(self) -> dict[str, Any]:
        if self._image is None:
            try:
                self._daemon = self._daemon or connect()
                image = self._daemon.inspect_image(self.ref)
            except (EngineAPIError, OSError) as err:
                raise ConvertError(f"{self.text}: cannot reach the engine: {short_error(err)}",
                                   hint="start Docker or `podman system service`, or set DOCKER_HOST") from err
            if image is None:
                raise ConfigError(f"{self.text}: no such image in the engine",
                                  hint="check `docker images` / `podman images`, or build it first")
            self._image = image
        return self._image

    def _connected(self) -> Daemon:
        self._get()
        return self._daemon  # type: ignore[return-value]  # set by _get

    def identify(self) -> Identity:
        # the image ID (= config digest) without a save; the config blob comes only on a cache miss
        image_id = str(self._get()["Id"])
        return Identity(None, image_id if image_id.startswith("sha256:") else "sha256:" + image_id)

    def materialize(self, workdir: Path, progress: Callable[[int], None] | None = None) -> Materialized:
        digest = self.identify().digest  # connects first
        daemon = self._connected()
        stored = engine_storage.locate(daemon.server, daemon.address, self._get(), digest)
        if stored is None:
            archive = self.spool(workdir, progress)
            return Materialized(archive.identify().config or b"", archive.layers())
        saved = functools.partial(self._saved_layer, workdir=workdir, progress=progress)
        return Materialized(stored.config, [
            LayerBlob(layer.tar_split, 0, layer.size, f"layer {n} ({short(layer.diff_id)})", diff_id=layer.diff_id,
                      chunks=functools.partial(engine_storage.assemble, layer), fallback=functools.partial(saved, n - 1))
            for n, layer in enumerate(stored.layers, start=1)])

    def _saved_layer(self, index: int, workdir: Path, progress: Callable[[int], None] | None) -> LayerBlob:
        """Layer ``index`` from the engine's save, made once for all layers that need it."""
        with self._lock:
            if self._saved is None:
                self._saved = self.spool(workdir, progress)
        return self._saved.layers()[index]

    def spool(self, workdir: Path, progress: Callable[[int], None] | None = None) -> DockerArchive:
        path, image_id = workdir / "daemon-save.tar", str(self._get()["Id"])
        api = self._connected().sdk_client(SAVE_TIMEOUT).api  # a large image's save can be slow to start
        with path.open("wb") as out:
            for chunk in api.get_image(image_id, chunk_size=1 << 20):
                out.write(chunk)
                if progress:
                    progress(len(chunk))
        # The engine's image ID content-addresses the image: the config digest (podman, classic Docker) or,
        # with Docker's containerd store, the manifest digest. Either way it is a sound cache key.
        return DockerArchive(path, None, self.text)


# --- OCI image layout ----------------------------------------------------------------------------------------


class OciLayoutSource(Source):
    agent = "oci"  # apptainer's bootstrap agent for this form (a deffile's ``bootstrap:``)

    def __init__(self, text: str, path: Path, tag: str | None) -> None:
        self.text, self.path, self.tag = text, path, tag
        self.image_ref = f"{path.name}:{tag}" if tag else path.name
        self._manifest: dict[str, Any] | None = None
        self._layout: OciLayout | None = None

    @property
    def layout(self) -> OciLayout:
        if self._layout is None:
            self._layout = self.open_layout()
        return self._layout

    def open_layout(self) -> OciLayout:
        return OciLayout(self.path, self.text)

    def manifest(self) -> dict[str, Any]:
        if self._manifest is None:
            chosen = self._pick(self.layout.manifests())
            depth = limits.size("index_depth")
            for _depth in range(depth):  # bounded: an index that lists itself cannot loop
                if chosen.media_type not in INDEX_TYPES:
                    break
                nested = json_object(self.layout.read_blob(chosen), f"{self.text}: image index {chosen.digest}")
                entries = nested.get("manifests") or []
                if not isinstance(entries, list):
                    raise IntegrityError(f"{self.text}: image index {chosen.digest}: manifests must be a list")
                chosen = pick_platform([descriptor(e, f"{self.text}: image index entry") for e in entries],
                                       self.text)
            else:
                raise IntegrityError(f"{self.text}: image indexes nest deeper than {depth} levels")
            self._manifest = json_object(self.layout.read_blob(chosen), f"{self.text}: manifest {chosen.digest}")
        return self._manifest

    def _pick(self, manifests: list[Descriptor]) -> Descriptor:
        known = ", ".join(sorted(filter(None, (m.ref_name for m in manifests)))) or "none"
        if self.tag is not None:
            for m in manifests:
                if m.ref_name == self.tag:
                    return m
            raise ConfigError(f"{self.text}: no manifest tagged {self.tag!r} in the layout", hint=f"tags: {known}")
        if len(manifests) != 1:
            raise ConfigError(f"{self.text}: the layout holds {len(manifests)} manifests",
                              hint=f"name one: oci:PATH:TAG, TAG one of {known}")
        return manifests[0]

    def _descriptors(self, key: str) -> list[Descriptor]:
        value = self.manifest().get(key)
        if key == "config":
            return [descriptor(value, f"{self.text}: manifest config")]
        if not isinstance(value or [], list):
            raise IntegrityError(f"{self.text}: manifest {key} must be a list")
        return [descriptor(d, f"{self.text}: manifest {key}[{n}]") for n, d in enumerate(value or [])]

    def identify(self) -> Identity:
        config_desc = self._descriptors("config")[0]
        return Identity(self.layout.read_blob(config_desc, limit=limits.size("config_size")), config_desc.digest)

    def materialize(self, workdir: Path, progress: Callable[[int], None] | None = None) -> Materialized:
        blobs = []
        for number, desc in enumerate(self._descriptors("layers"), start=1):
            path, offset, size = self.layout.blob_range(desc.digest)  # a regular file (member), or an error
            if size != desc.size:
                raise IntegrityError(f"{self.text}: layer blob {desc.digest} has {size} bytes, "
                                     f"its descriptor says {desc.size}")
            blobs.append(LayerBlob(path, offset, size, f"layer {number} ({short(desc.digest)})",
                                   digest=desc.digest))
        return Materialized(self.identify().config or b"", blobs)


def pick_platform(manifests: list[Descriptor], what: str) -> Descriptor:
    """The entry of an image index for this host (linux/<arch>), as runtimes pick it."""
    arch = host_arch()
    for m in manifests:
        if m.platform.get("architecture") == arch and m.platform.get("os", "linux") == "linux":
            return m
    found = ", ".join(f"{m.platform.get('os')}/{m.platform.get('architecture')}" for m in manifests)
    raise ConvertError(f"{what}: the image index has no linux/{arch} image", hint=f"platforms: {found or 'none'}")


# The readers of local forms, by the form's name in the SOURCE grammar (a new form is one entry here and one in
# the grammar); ``docker://`` is read by the registry package's reader, passed to :func:`parse_source`.
READERS: dict[str, Reader] = {
    "docker-daemon": lambda spec: DaemonSource(spec.text, spec.ref or ""),
    "docker-archive": lambda spec: DockerArchiveSource(spec.text, spec.path or Path(), spec.ref),
    "oci": lambda spec: OciLayoutSource(spec.text, spec.path or Path(), spec.ref),
    "oci-archive": _oci_archive_source,
}
