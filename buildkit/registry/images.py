"""Container images pushed straight through the registry API (no daemon): OCI layouts and docker archives.

Blobs go up first (each HEAD-checked, so a repeat push sends nothing), then the manifest with ckit's
annotations. A docker archive (``docker save`` / ``podman save``) becomes an OCI manifest whose layers keep
their bytes (``tar`` or ``tar+gzip``), so layer digests equal those in the archive.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import limits
from ..config.jsondoc import parse as parse_json
from ..errors import ConfigError, IntegrityError
from ..oci.archive import archive_images
from ..oci.digest import of_bytes
from ..oci.layout import Descriptor, OciLayout, descriptor, json_object
from .artifacts import canonical_json
from .client import DOCKER_LIST, OCI_INDEX, OCI_MANIFEST, Progress, RegistryClient
from .reference import Reference
from .streams import READ_SIZE

OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"


Annotate = Callable[[dict[str, str]], dict[str, str]]  # image labels -> manifest annotations


@dataclass(frozen=True)
class ImagePushResult:
    reference: str
    digest: str
    size: int
    uploaded_bytes: int | None  # None when the engine pushed (it does not say)
    labels: dict[str, str]


def _labels(config_bytes: bytes) -> dict[str, str]:
    """The image labels, or none when the config is not what an image config looks like."""
    try:
        config = parse_json(config_bytes, "image config", error=IntegrityError)
    except IntegrityError:
        return {}
    inner = config.get("config")
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    return {k: str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def with_annotations(manifest: bytes, media_type: str, annotations: dict[str, str]) -> bytes:
    """The manifest with ``annotations`` merged in (OCI types only: Docker schema 2 has no annotations)."""
    if media_type not in (OCI_MANIFEST, OCI_INDEX) or not annotations:
        return manifest
    data = parse_json(manifest, "manifest", error=IntegrityError)
    present = data.get("annotations")
    data["annotations"] = dict(sorted({**(present if isinstance(present, dict) else {}), **annotations}.items()))
    return canonical_json(data)


# -- OCI layout --------------------------------------------------------------------------------------------


def select(layout: OciLayout, tag: str | None) -> Descriptor:
    """The index entry tagged ``tag``, or the only entry when no tag is given."""
    manifests = layout.manifests()
    found = [m for m in manifests if m.ref_name == tag] if tag else manifests
    if len(found) != 1:
        names = sorted({m.ref_name or m.digest for m in manifests})
        what = f"tag {tag!r}" if tag else "an image (the layout holds several)"
        raise ConfigError(f"{layout.what}: cannot find {what}", hint=f"write {layout.what}:TAG, one of: "
                          + ", ".join(names))
    return found[0]


def push_oci_layout(client: RegistryClient, ref: Reference, root: Path, tag: str | None, annotate: Annotate,
                    progress: Progress | None = None) -> ImagePushResult:
    layout = OciLayout(root, f"oci:{root}")
    counter = [0, 0]
    labels: dict[str, str] = {}
    pushed: dict[str, str] = {}  # each manifest once: an index listing the same child many times cannot fan out
    max_depth, max_count = limits.size("index_depth"), limits.size("index_manifests")

    def push_manifest(desc: Descriptor, reference: str, top: bool, depth: int = 0) -> str:
        if desc.digest in pushed and not top:
            return pushed[desc.digest]
        if depth > max_depth or len(pushed) >= max_count:
            raise IntegrityError(f"{layout.what}: image indexes nest deeper than {max_depth} levels or list more "
                                 f"than {max_count} manifests", hint="CKIT_MAX_INDEX_DEPTH and "
                                 "CKIT_MAX_INDEX_MANIFESTS raise the limits")
        data = layout.read_blob(desc)
        body = json_object(data, f"{layout.what}: manifest {desc.digest}")
        media_type = desc.media_type or str(body.get("mediaType") or OCI_MANIFEST)
        if media_type in (OCI_INDEX, DOCKER_LIST):
            for n, child in enumerate(_list(body, "manifests", layout.what)):
                item = descriptor(child, f"{layout.what}: manifests[{n}] of {desc.digest}")
                push_manifest(item, item.digest, top=False, depth=depth + 1)
        else:
            config = descriptor(body.get("config"), f"{layout.what}: config of {desc.digest}")
            layers = [descriptor(x, f"{layout.what}: layers[{n}] of {desc.digest}")
                      for n, x in enumerate(_list(body, "layers", layout.what))]
            if top:
                labels.update(_labels(layout.read_blob(config, limit=limits.size("config_size"))))
            for blob in [config, *layers]:
                counter[0] += blob.size
                with layout.open_blob(blob.digest) as handle:  # a regular file inside the layout, never a link
                    counter[1] += client.upload_blob(ref.repository, handle, blob.digest, blob.size,
                                                     progress=progress)
        if top:
            data = with_annotations(data, media_type, annotate(labels))
        pushed[desc.digest] = client.put_manifest(ref.repository, reference, data, media_type)
        return pushed[desc.digest]

    digest = push_manifest(select(layout, tag), ref.tag or ref.reference, top=True)
    return ImagePushResult(str(ref.with_digest(digest)), digest, counter[0], counter[1], labels)


def _list(body: dict[str, Any], key: str, what: str) -> list[Any]:
    value = body.get(key) or []
    if not isinstance(value, list):
        raise IntegrityError(f"{what}: {key} must be a list")
    return value


# -- docker archive --------------------------------------------------------------------------------------


def _hash_member(archive: tarfile.TarFile, member: tarfile.TarInfo) -> tuple[str, bytes]:
    src = archive.extractfile(member)
    if src is None:
        raise ConfigError(f"docker archive member {member.name} is not a file")
    h = hashlib.sha256()
    head = b""
    while chunk := src.read(READ_SIZE):
        if not head:
            head = chunk[:4]
        h.update(chunk)
    return "sha256:" + h.hexdigest(), head


def _read_member(archive: tarfile.TarFile, name: str, what: str) -> bytes:
    """A small member (manifest.json, the config), size-capped before it is read."""
    member = archive.getmember(name)
    limit = limits.size("config_size")
    source = archive.extractfile(member)
    if source is None or member.size > limit:
        raise IntegrityError(f"{what}: member {name!r} is not a file of at most {limit} bytes")
    return source.read(limit + 1)


def _layer_type(head: bytes) -> str:
    if head[:2] == b"\x1f\x8b":
        return OCI_LAYER_GZIP
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return OCI_LAYER_ZSTD
    return OCI_LAYER_TAR


def push_docker_archive(client: RegistryClient, ref: Reference, path: Path, annotate: Annotate,
                        progress: Progress | None = None) -> ImagePushResult:
    try:
        archive = tarfile.open(path, "r:")  # noqa: SIM115 - closed below
    except (OSError, tarfile.TarError) as err:
        raise ConfigError(f"docker-archive:{path}: not a readable tar archive ({err})") from err
    with archive:
        what = f"docker-archive:{path}"
        try:
            entries = archive_images(_read_member(archive, "manifest.json", what), what)
        except (KeyError, AttributeError) as err:
            raise ConfigError(f"{what}: no manifest.json",
                              hint="write the archive with `docker save` or `podman save --format docker-archive`") from err
        if len(entries) != 1:
            raise ConfigError(f"{what}: holds {len(entries)} images; ckit pushes one")
        entry = entries[0]
        config_bytes = _read_member(archive, entry.config, what)
        config_digest = of_bytes(config_bytes)
        uploaded = client.upload_blob(ref.repository, io.BytesIO(config_bytes), config_digest, len(config_bytes))
        layers = []
        total = len(config_bytes)
        for name in entry.layers:
            member = archive.getmember(name)
            digest, head = _hash_member(archive, member)
            layers.append({"mediaType": _layer_type(head), "digest": digest, "size": member.size})
            total += member.size
            uploaded += client.upload_blob(ref.repository, archive.extractfile(member), digest,  # type: ignore[arg-type]
                                           member.size, progress=progress)
    labels = _labels(config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": layers,
    }
    annotations = annotate(labels)
    if annotations:
        manifest["annotations"] = dict(sorted(annotations.items()))
    digest = client.put_manifest(ref.repository, ref.tag or ref.reference, canonical_json(manifest), OCI_MANIFEST)
    return ImagePushResult(str(ref.with_digest(digest)), digest, total, uploaded, labels)

