"""ORAS artifacts: a ``.sif`` or ``.sqsh`` file as one layer of an OCI manifest, pushed and pulled verified.

Media types:

| file | config media type | layer media type |
|---|---|---|
| `.sif` | `application/vnd.sylabs.sif.config.v1+json` | `appliciation/vnd.sylabs.sif.layer.tar` (sic), or `application/vnd.sylabs.sif.layer.v1.sif` for a site that pulls it |
| `.sqsh` | `application/vnd.ckit.enroot.config.v1+json` | `application/vnd.ckit.enroot.squashfs.v1` |

A SIF has two layer types (:mod:`buildkit.site.compat`): the one Singularity pushed first, misspelt as it is,
which ``pull oras://`` of every SingularityCE (3.4.2, run here, to today's main) and every Apptainer finds; and the
v1 type that SingularityCE 3.7 and Apptainer push themselves, which SingularityCE before 3.7 does not find ("no
layer found corresponding to SIF image"). So a ``.sif`` goes up with the first type unless ``--site`` names a site
whose Singularity/Apptainer versions all pull v1. Checked against the sources (SingularityCE
``internal/pkg/client/oras``, Apptainer the same): the config is the 2-byte ``{}``, the one layer carries the
title annotation, and a pull checks for exactly one layer of either type and *not* the config type, which older
versions set inconsistently (``…sif.config.v1`` without ``+json``). ckit's pull recognises a SIF artifact the same
way, and writes the file executable (0755 before the umask), as apptainer's pull does.

The layer carries ``org.opencontainers.image.title`` (the file name); the manifest carries the annotations
of :func:`buildkit.registry.transfer.annotations.for_artifact`.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import IntegrityError, RegistryError
from ...fs.files import atomic_path
from ...image.inspect import detect
from ...oci.digest import of_bytes
from ...oci.labels import TITLE
from ...oci.layout import descriptor, json_object
from ...site.compat import SIF_LAYER_PROTO, SIF_LAYER_V1
from ..distribution.client import OCI_MANIFEST, Progress, RegistryClient
from ..distribution.reference import Reference
from ..distribution.streams import READ_SIZE
from . import known_digests

EMPTY_CONFIG = b"{}"


@dataclass(frozen=True)
class ArtifactKind:
    name: str
    suffix: str
    config_type: str
    layer_type: str
    mode: int  # of a pulled file, before the umask
    also_layer_types: tuple[str, ...] = ()  # other layer media types a pull accepts (and a push may use)

    def layer_types(self) -> tuple[str, ...]:
        return (self.layer_type, *self.also_layer_types)


# the layer type every Singularity/Apptainer pulls first: a .sif pushed for no site in particular runs anywhere
SIF = ArtifactKind("sif", ".sif", "application/vnd.sylabs.sif.config.v1+json", SIF_LAYER_PROTO, 0o755,
                   (SIF_LAYER_V1,))
SQSH = ArtifactKind("sqsh", ".sqsh", "application/vnd.ckit.enroot.config.v1+json",
                    "application/vnd.ckit.enroot.squashfs.v1", 0o644)
KINDS = (SIF, SQSH)


def detect_kind(path: Path) -> ArtifactKind:
    """A SIF or an Enroot squashfs, by content (see :func:`buildkit.image.inspect.detect`)."""
    return SIF if detect(path) == "sif" else SQSH


def kind_of_manifest(manifest: dict) -> ArtifactKind | None:
    """The artifact kind by its layer media types (as apptainer decides), else by its config media type."""
    layers = manifest.get("layers")
    types = {x.get("mediaType") for x in layers if isinstance(x, dict)} if isinstance(layers, list) else set()
    config = manifest.get("config")
    config_type = config.get("mediaType") if isinstance(config, dict) else None
    for kind in KINDS:
        if types & set(kind.layer_types()) or config_type == kind.config_type:
            return kind
    return None


def canonical_json(data: object) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def build_manifest(kind: ArtifactKind, layer_digest: str, layer_size: int, title: str,
                   annotations: dict[str, str], layer_type: str | None = None) -> bytes:
    """The artifact's manifest; ``layer_type``: one of the kind's layer types (default: its first)."""
    if layer_type is not None and layer_type not in kind.layer_types():
        raise RegistryError(f"{layer_type} is not a layer type of a .{kind.name} artifact")
    manifest: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": kind.config_type, "digest": of_bytes(EMPTY_CONFIG), "size": len(EMPTY_CONFIG)},
        "layers": [{"mediaType": layer_type or kind.layer_type, "digest": layer_digest, "size": layer_size,
                    "annotations": {TITLE: title}}],
    }
    if annotations:
        manifest["annotations"] = dict(sorted(annotations.items()))
    return canonical_json(manifest)


@dataclass(frozen=True)
class PushResult:
    reference: str
    digest: str
    kind: str
    size: int
    uploaded_bytes: int
    media_type: str = OCI_MANIFEST


def push_artifact(client: RegistryClient, ref: Reference, path: Path, annotations: dict[str, str],
                  progress: Progress | None = None, layer_type: str | None = None) -> PushResult:
    """Push the file as one layer (of ``layer_type``, default the kind's first). A file ckit knows the digest
    of is offered to the registry first (HEAD); a new one is hashed while it is uploaded, and its digest
    remembered for the next push."""
    kind = detect_kind(path)
    size = path.stat().st_size
    repo = ref.repository
    uploaded = client.upload_blob(repo, io.BytesIO(EMPTY_CONFIG), of_bytes(EMPTY_CONFIG), len(EMPTY_CONFIG))
    digest = known_digests.lookup(path)
    if digest is not None:
        uploaded += client.upload_blob(repo, path, digest, size, progress=progress)
    else:
        seen = known_digests.identity(path)
        digest, sent = client.upload_new_file(repo, path, size, progress)
        uploaded += sent
        known_digests.remember(path, digest, seen)
    manifest = build_manifest(kind, digest, size, path.name, annotations, layer_type)
    manifest_digest = client.put_manifest(repo, ref.tag or ref.reference, manifest, OCI_MANIFEST)
    return PushResult(str(ref.with_digest(manifest_digest)), manifest_digest, kind.name, size, uploaded)


_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,200}$")


def output_name(ref: Reference, kind: ArtifactKind, title: str | None) -> str:
    """The layer's title when it is a plain file name, else ``<repo-basename>_<tag>.<suffix>``."""
    if title and _SAFE_NAME.fullmatch(title) and title not in (".", ".."):
        return title
    tag = ref.tag or (ref.digest or "latest").replace("sha256:", "")[:12]
    return f"{ref.repository.rsplit('/', 1)[-1]}_{tag}{kind.suffix}"


@dataclass(frozen=True)
class PullResult:
    path: Path
    digest: str
    manifest_digest: str
    kind: str
    size: int
    annotations: dict[str, str]


def fetch_artifact_manifest(client: RegistryClient, ref: Reference) -> tuple[dict, str, ArtifactKind | None]:
    manifest = client.get_manifest(ref.repository, ref.reference)
    if ref.digest and manifest.digest != ref.digest:
        raise IntegrityError(f"manifest of {ref} has digest {manifest.digest}")
    data = json_object(manifest.data, f"manifest of {ref}")
    return data, manifest.digest, kind_of_manifest(data)


def pull_artifact(client: RegistryClient, ref: Reference, out_dir: Path, progress: Progress | None = None,
                  name: str | None = None, total: Callable[[int], None] | None = None,
                  manifest: tuple[dict, str, ArtifactKind | None] | None = None) -> PullResult:
    """Download the artifact's layer into ``out_dir``; it appears at its final path only once verified.
    ``manifest`` is what :func:`fetch_artifact_manifest` returned when the caller fetched it already."""
    data, manifest_digest, kind = manifest or fetch_artifact_manifest(client, ref)
    if kind is None:
        config = data.get("config")
        raise RegistryError(f"{ref} is not a .sif or .sqsh artifact (config media type "
                            f"{(config if isinstance(config, dict) else {}).get('mediaType')!r})",
                            hint="for a container image, pull with --to sif or --to sqsh to convert it")
    entries = data.get("layers") or []
    if not isinstance(entries, list):
        raise IntegrityError(f"{ref}: the manifest's layers must be a list")
    layers = [x for x in entries if isinstance(x, dict) and x.get("mediaType") in kind.layer_types()]
    if len(layers) != 1:
        raise RegistryError(f"{ref}: expected one {kind.layer_type} layer, found {len(layers)}")
    layer = descriptor(layers[0], f"{ref}: layer")
    final = out_dir / (name or output_name(ref, kind, layer.annotations.get(TITLE)))
    if total:
        total(layer.size)
    download_verified(client, ref.repository, layer.digest, layer.size, final, progress, mode=_mode(kind))
    known_digests.remember(final, layer.digest)
    annotations = data.get("annotations")
    return PullResult(final, layer.digest, manifest_digest, kind.name, layer.size,
                      {k: str(v) for k, v in annotations.items()} if isinstance(annotations, dict) else {})


def _mode(kind: ArtifactKind) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return kind.mode & ~umask


def download_verified(client: RegistryClient, repo: str, digest: str, size: int, final: Path,
                      progress: Progress | None = None, mode: int = 0o644) -> None:
    """Stream a blob into a temp file next to ``final``, check it, then rename; nothing is left on error."""
    with atomic_path(final, mode=mode) as tmp, open(tmp, "wb") as out, client.open_blob(repo, digest, size) as blob:
        while chunk := blob.read(READ_SIZE):
            out.write(chunk)
            if progress:
                progress(len(chunk))
