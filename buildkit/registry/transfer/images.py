"""Container images pushed through the registry API (no daemon): their manifests, in the format every client reads.

The manifest keeps the media type the source had, unless ``--format`` says otherwise: Docker schema 2 for a
``docker save`` archive or an engine's image, the layout's own type for an OCI layout. This matters beyond
taste: enroot (and so Pyxis) probes a manifest with ``curl -I`` and ``Accept: */*``, and distribution 2.8 answers
that probe with 404 for an OCI manifest; a Docker schema 2 manifest answers 200 (enroot 4.1.2's
docker:// import, run under Pyxis in tests/integration/test_pyxis_*.py). Distribution 2.x answers that probe of a
schema 2 manifest by rewriting it to schema 1, which stores the empty layer's blob in the repository on first use;
the nodes of a job probing a fresh push at once race on that write, and one gets 400 ("manifest invalid"). A push
by tag therefore ends with the probe, asked once (:func:`_probe_as_enroot`), so the blob is there before a job asks.

| format | manifest | config | layer | index |
|---|---|---|---|---|
| docker | `…docker.distribution.manifest.v2+json` | `…docker.container.image.v1+json` | `…docker.image.rootfs.diff.tar.gzip` | manifest list |
| oci | `…oci.image.manifest.v1+json` | `…oci.image.config.v1+json` | `…oci.image.layer.v1.tar+gzip` (`+zstd`) | image index |

Docker schema 2 has no annotations: ckit's annotations go only on OCI manifests (an image ckit built carries the
same facts as labels in its config either way). A manifest whose content does not change (an index's child pushed
in its own format with the source's own blobs) is pushed byte for byte, so its digest stays the layout's.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from ...config.jsondoc import parse as parse_json
from ...errors import CkitError, CompatError, ConfigError, IntegrityError
from ...oci.digest import of_bytes
from ...outside import ascii_int
from ...site.compat import SIF_LAYER_PROTO
from ..distribution.client import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, RegistryClient
from .layers import Blob, LayerSource, Uploader

OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"

FORMATS = ("docker", "oci")
MANIFEST_TYPE = {"docker": DOCKER_MANIFEST, "oci": OCI_MANIFEST}
INDEX_TYPE = {"docker": DOCKER_LIST, "oci": OCI_INDEX}
CONFIG_TYPE = {"docker": DOCKER_CONFIG, "oci": OCI_CONFIG}
LAYER_TYPE = {("docker", "gzip"): DOCKER_LAYER_GZIP, ("oci", "gzip"): OCI_LAYER_GZIP,
              ("oci", "zstd"): OCI_LAYER_ZSTD, ("oci", "tar"): OCI_LAYER_TAR}
IMAGE_CONFIG_TYPES = (OCI_CONFIG, DOCKER_CONFIG)

log = logging.getLogger("ckit.registry")


def format_of(media_type: str) -> str:
    """``docker`` for Docker's manifest and list types, ``oci`` for everything else."""
    return "docker" if media_type in (DOCKER_MANIFEST, DOCKER_LIST) else "oci"


def compression_of(media_type: str) -> str:
    """What a layer media type says about its bytes: tar, gzip, zstd, or opaque (not an image layer)."""
    if media_type == SIF_LAYER_PROTO:  # a whole SIF file, although its type ends in .tar
        return "opaque"
    if media_type.endswith(("+gzip", ".tar.gzip")):
        return "gzip"
    if media_type.endswith(("+zstd", ".tar.zstd")):
        return "zstd"
    if media_type.endswith((".tar", "layer.v1.tar", "rootfs.diff.tar")):
        return "tar"
    return "opaque"


def canonical_json(data: object) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _config_object(config: bytes) -> dict[str, Any]:
    """The image config as a JSON object, or {} when it is not one (it is only read for labels and a date)."""
    try:
        return parse_json(config, "image config", error=IntegrityError)
    except IntegrityError:
        return {}


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def config_labels(config: bytes) -> dict[str, str]:
    labels = _object(_object(_config_object(config).get("config")).get("Labels"))
    return {str(k): str(v) for k, v in labels.items()}


@dataclass(frozen=True)
class ImageInput:
    """One image as its source holds it."""

    what: str
    config: bytes
    layers: list[LayerSource]
    native: str  # the format the source holds it in
    config_media_type: str | None = None  # as the source's manifest names it
    manifest: dict[str, Any] | None = None  # the source's own manifest (layouts): other fields are kept
    original: bytes | None = None  # its bytes, pushed as they are when nothing changes

    @property
    def labels(self) -> dict[str, str]:
        return config_labels(self.config)

    @property
    def created(self) -> str | None:
        """The config's ``created`` date (RFC 3339), when it has a plausible one."""
        value = _config_object(self.config).get("created")
        return value if isinstance(value, str) and 0 < len(value) <= 64 and ascii_int(value[:4]) is not None else None


@dataclass(frozen=True)
class Pushed:
    digest: str
    media_type: str
    manifest_size: int  # bytes of the manifest itself (what a descriptor of it states)
    size: int  # bytes of the blobs it names (config and layers as stored in the registry)
    labels: dict[str, str] = field(default_factory=dict)


def _config_type(image: ImageInput, fmt: str) -> str:
    given = image.config_media_type
    if given is None or (fmt != image.native and given in IMAGE_CONFIG_TYPES):
        return CONFIG_TYPE[fmt]
    if fmt != image.native:
        raise CompatError(f"{image.what}: its config type {given!r} has no {fmt} form",
                          hint=f"push it with --format {image.native}")
    return given


def _layer_descriptor(layer: LayerSource, blob: Blob, fmt: str, image: ImageInput, original: dict) -> dict:
    keep_type = not blob.changed and fmt == image.native and layer.media_type
    media_type = layer.media_type if keep_type else LAYER_TYPE.get((fmt, blob.compression))
    if media_type is None:
        raise CompatError(f"{layer.what}: a {blob.compression} layer has no place in a {fmt} manifest",
                          hint="push it with --format oci")
    if fmt == "docker":
        return {"mediaType": media_type, "size": blob.size, "digest": blob.digest,
                **({"urls": original["urls"]} if original.get("urls") else {})}
    return {**original, "mediaType": media_type, "size": blob.size, "digest": blob.digest}


def image_manifest(image: ImageInput, fmt: str, blobs: list[Blob], annotations: dict[str, str] | None) -> bytes:
    """The manifest of ``image`` in ``fmt`` for the blobs as pushed (its own bytes when nothing changed)."""
    unchanged = fmt == image.native and not any(b.changed for b in blobs) and image.original is not None
    if unchanged and not annotations:
        return image.original  # type: ignore[return-value]
    source = image.manifest or {}
    old_layers = source.get("layers") or [{} for _ in blobs]
    layers = [_layer_descriptor(layer, blob, fmt, image, dict(old) if isinstance(old, dict) else {})
              for layer, blob, old in zip(image.layers, blobs, old_layers, strict=True)]
    config = {"mediaType": _config_type(image, fmt), "size": len(image.config), "digest": of_bytes(image.config)}
    if fmt == "docker":
        body: dict[str, Any] = {"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": config, "layers": layers}
    else:
        given = source.get("config")
        old_config = given if isinstance(given, dict) else {}
        body = {**{k: v for k, v in source.items() if k not in ("mediaType", "config", "layers")},
                "schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": {**old_config, **config}, "layers": layers}
        if annotations:
            body["annotations"] = dict(sorted({**_object(body.get("annotations")), **annotations}.items()))
    return canonical_json(body)


def push_image(client: RegistryClient, repo: str, reference: str, image: ImageInput, fmt: str | None,
               uploader: Uploader, annotations: dict[str, str] | None = None) -> Pushed:
    """Upload the image's blobs (compressing plain layers), then put its manifest under ``reference``."""
    fmt = fmt or image.native
    _config_type(image, fmt)  # an impossible conversion fails before anything is sent
    uploader.config(image.config, of_bytes(image.config))
    blobs = [uploader.layer(layer) for layer in image.layers]
    data = image_manifest(image, fmt, blobs, annotations if fmt == "oci" else None)
    uploader.drain()  # a registry refuses a manifest whose blobs it does not have yet
    media_type = MANIFEST_TYPE[fmt] if data is not image.original else _original_type(image)
    digest = client.put_manifest(repo, reference, data, media_type)
    if media_type == DOCKER_MANIFEST and ":" not in reference:  # a tag: distribution rewrites only those
        _probe_as_enroot(client, repo, reference)
    return Pushed(digest, media_type, len(data), len(image.config) + sum(b.size for b in blobs), image.labels)


def _probe_as_enroot(client: RegistryClient, repo: str, tag: str) -> None:
    """Ask for the manifest once as enroot's first request does (``Accept: */*``): see the module's docstring.
    The push has succeeded whatever the answer, so a failed probe is only logged (``--debug``)."""
    try:
        client.head_manifest(repo, tag, accept="*/*")
    except CkitError as err:
        log.debug("%s/%s:%s as enroot asks for it: %s", client.host, repo, tag, err.message)


def _original_type(image: ImageInput) -> str:
    return str((image.manifest or {}).get("mediaType") or MANIFEST_TYPE[image.native])


def index_manifest(body: dict[str, Any], native: str, fmt: str, children: list[tuple[dict[str, Any], Pushed]],
                   annotations: dict[str, str] | None) -> bytes:
    """An index (or manifest list) naming the children as pushed."""
    if fmt == "docker":
        entries = [{"mediaType": pushed.media_type, "size": pushed.manifest_size, "digest": pushed.digest,
                    **({"platform": old["platform"]} if old.get("platform") else {})} for old, pushed in children]
        return canonical_json({"schemaVersion": 2, "mediaType": DOCKER_LIST, "manifests": entries})
    entries = [{**old, "mediaType": pushed.media_type, "size": pushed.manifest_size, "digest": pushed.digest}
               for old, pushed in children]
    out = {**body, "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
    if annotations:
        out["annotations"] = dict(sorted({**_object(body.get("annotations")), **annotations}.items()))
    return canonical_json(out)


def check_format(fmt: str | None) -> str | None:
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    return fmt


def check_nesting(depth: int, limit: int, what: str) -> None:
    if depth > limit:
        raise IntegrityError(f"{what}: image indexes nest deeper than {limit} levels")
