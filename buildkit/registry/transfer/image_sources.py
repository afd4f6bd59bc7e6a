"""What ``ckit push`` reads an image from, as :class:`.images.ImageInput`: docker archives and OCI layouts.

* A docker archive (``docker-archive:``, and what an engine's save stream is spooled into for ``docker-daemon:``
  and stacks) is read by the conversion's own reader (:class:`buildkit.image.sources.docker_archive.DockerArchive`: members
  indexed, links inside the archive followed, ``diff_ids`` checked for count and grammar). Its layers are plain
  tar members, compressed on the way up and checked against the config's ``diff_ids``.
* An OCI layout (``oci:`` folder or ``oci-archive:`` tar) is walked from the tagged index entry down through
  nested indexes (bounded in depth and count, each manifest once), every manifest and config verified against its digest before use.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ...config import limits
from ...errors import ConfigError, IntegrityError
from ...image.sources.docker_archive import DockerArchive
from ...oci.archive import OciArchive
from ...oci.layout import Descriptor, OciLayout, descriptor, json_object
from ...oci.sources import SourceSpec
from ..distribution.client import DOCKER_LIST, OCI_INDEX, OCI_MANIFEST, RegistryClient
from .images import ImageInput, Pushed, compression_of, format_of, index_manifest, push_image
from .layers import LayerSource, Uploader, sniff

Annotate = Callable[[ImageInput | None], dict[str, str]]  # the top image (labels, date) -> manifest annotations


class Layout(Protocol):
    """An OCI layout folder (:class:`buildkit.oci.layout.OciLayout`) or tar (:class:`buildkit.oci.archive.OciArchive`)."""

    what: str

    def manifests(self) -> list[Descriptor]: ...
    def read_blob(self, desc: Descriptor, limit: int | None = ...) -> bytes: ...
    def blob_range(self, digest: str) -> tuple[Path, int, int]: ...


def open_layout(spec: SourceSpec) -> Layout:
    """The layout an ``oci:`` (folder) or ``oci-archive:`` (tar) SOURCE names."""
    path = spec.path or Path()
    return OciArchive(path, spec.text) if spec.form == "oci-archive" else OciLayout(path, spec.text)


def from_docker_archive(path: Path, ref: str | None, what: str) -> ImageInput:
    archive = DockerArchive(path, ref, what)
    config = archive.identify().config or b""
    layers = []
    for number, blob in enumerate(archive.layers(), start=1):
        layers.append(LayerSource(blob.path, blob.offset, blob.size, f"{what}: layer {number}",
                                  sniff(blob.path, blob.offset), diff_id=blob.diff_id))
    return ImageInput(what, config, layers, native="docker")


def select(layout: Layout, tag: str | None) -> Descriptor:
    """The index entry tagged ``tag``, or the only entry when no tag is given."""
    manifests = layout.manifests()
    found = [m for m in manifests if m.ref_name == tag] if tag else manifests
    if len(found) != 1:
        names = sorted({m.ref_name or m.digest for m in manifests})
        what = f"tag {tag!r}" if tag else "an image (the layout holds several)"
        raise ConfigError(f"{layout.what}: cannot find {what}", hint=f"write {layout.what}:TAG, one of: "
                          + ", ".join(names))
    return found[0]


def _list(body: dict[str, Any], key: str, what: str) -> list[Any]:
    value = body.get(key) or []
    if not isinstance(value, list):
        raise IntegrityError(f"{what}: {key} must be a list")
    return value


def layout_image(layout: Layout, desc: Descriptor, body: dict[str, Any], data: bytes) -> ImageInput:
    """The image a layout's manifest describes; each layer a byte range of its blob, its size checked."""
    what = f"{layout.what}: manifest {desc.digest}"
    config_desc = descriptor(body.get("config"), f"{what}: config")
    config = layout.read_blob(config_desc, limit=limits.size("config_size"))
    layers = []
    for n, item in enumerate(_list(body, "layers", what)):
        layer = descriptor(item, f"{what}: layers[{n}]")
        path, offset, size = layout.blob_range(layer.digest)
        if size != layer.size:
            raise IntegrityError(f"{layout.what}: layer blob {layer.digest} has {size} bytes, its descriptor "
                                 f"says {layer.size}")
        compression = compression_of(layer.media_type)
        layers.append(LayerSource(path, offset, size, f"{layout.what}: layer {n + 1}", compression,
                                  digest=layer.digest, diff_id=layer.digest if compression == "tar" else None,
                                  media_type=layer.media_type))
    media_type = desc.media_type or str(body.get("mediaType") or OCI_MANIFEST)
    return ImageInput(layout.what, config, layers, native=format_of(media_type),
                      config_media_type=config_desc.media_type or None, manifest=body, original=data)


class LayoutPush:
    """Push a layout's tagged entry (an image, or an index and every image under it) in ``fmt`` or as it is."""

    def __init__(self, client: RegistryClient, repo: str, layout: Layout, fmt: str | None, uploader: Uploader,
                 annotate: Annotate) -> None:
        self.client, self.repo, self.layout, self.fmt = client, repo, layout, fmt
        self.uploader, self.annotate = uploader, annotate
        self.labels: dict[str, str] = {}
        self.pushed: dict[str, Pushed] = {}  # each manifest once: an index listing a child many times cannot fan out

    def run(self, tag: str | None, reference: str) -> Pushed:
        return self.push(select(self.layout, tag), reference, top=True, depth=0)

    def push(self, desc: Descriptor, reference: str, top: bool, depth: int) -> Pushed:
        if not top and desc.digest in self.pushed:
            return self.pushed[desc.digest]
        max_depth, max_count = limits.size("index_depth"), limits.size("index_manifests")
        if depth > max_depth or len(self.pushed) >= max_count:
            raise IntegrityError(f"{self.layout.what}: image indexes nest deeper than {max_depth} levels or list "
                                 f"more than {max_count} manifests",
                                 hint="CKIT_MAX_INDEX_DEPTH and CKIT_MAX_INDEX_MANIFESTS raise the limits")
        self.pushed[desc.digest] = pushed = self._push(desc, reference, top, depth)
        return pushed

    def _push(self, desc: Descriptor, reference: str, top: bool, depth: int) -> Pushed:
        data = self.layout.read_blob(desc, limit=limits.size("manifest_size"))
        body = json_object(data, f"{self.layout.what}: manifest {desc.digest}")
        media_type = desc.media_type or str(body.get("mediaType") or OCI_MANIFEST)
        if media_type not in (OCI_INDEX, DOCKER_LIST):
            image = layout_image(self.layout, desc, body, data)
            annotations = None
            if top:
                self.labels = image.labels
                annotations = self.annotate(image)
            return push_image(self.client, self.repo, reference, image, self.fmt, self.uploader, annotations)
        children = []
        for n, item in enumerate(_list(body, "manifests", self.layout.what)):
            child = descriptor(item, f"{self.layout.what}: manifests[{n}] of {desc.digest}")
            children.append((dict(item), self.push(child, child.digest, top=False, depth=depth + 1)))
        return self._put_index(body, data, media_type, children, reference, top)

    def _put_index(self, body: dict[str, Any], data: bytes, media_type: str,
                   children: list[tuple[dict[str, Any], Pushed]], reference: str, top: bool) -> Pushed:
        native = format_of(media_type)
        fmt = self.fmt or native
        annotations = self.annotate(None) if top and fmt == "oci" else None
        same = all(old.get("digest") == pushed.digest for old, pushed in children)
        if fmt == native and same and not annotations:
            out, out_type = data, media_type
        else:
            out = index_manifest(body, native, fmt, children, annotations)
            out_type = OCI_INDEX if fmt == "oci" else DOCKER_LIST
        digest = self.client.put_manifest(self.repo, reference, out, out_type)
        return Pushed(digest, out_type, len(out), sum(p.size for _, p in children), self.labels)

