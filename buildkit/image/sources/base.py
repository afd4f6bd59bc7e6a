"""What every image source gives a conversion: the image's identity (cheap), then its config and layers.

A source first *identifies* the image cheaply (config blob and its digest, the cache key input) and only on a
cache miss *materialises* its layers: each layer is then a byte range of a file on disk (an archive's member, a
blob of a layout, a spooled download), possibly compressed, or a stream that is spooled as it arrives.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConvertError
from ...oci.layout import Descriptor
from ...oci.sources import SourceSpec

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

    @property
    def private(self) -> bool:
        """Read with credentials (a registry's): what is made of it is its user's alone."""
        return False

    def identify(self) -> Identity:
        raise ConvertError(f"{self.text}: this source cannot be read")  # overridden by every source

    def materialize(self, workdir: Path, progress: Callable[[int], None] | None = None) -> Materialized:
        """Config blob and layers, downloading or spooling into ``workdir`` where needed."""
        raise ConvertError(f"{self.text}: this source cannot be read")

Reader = Callable[[SourceSpec], "Source"]  # a SOURCE form's reader: the parsed SOURCE -> its Source

def short(digest: str) -> str:
    return digest[:19] + "…" if len(digest) > 19 else digest


def pick_platform(manifests: list[Descriptor], what: str) -> Descriptor:
    """The entry of an image index for this host (linux/<arch>), as runtimes pick it."""
    arch = host_arch()
    for m in manifests:
        if m.platform.get("architecture") == arch and m.platform.get("os", "linux") == "linux":
            return m
    found = ", ".join(f"{m.platform.get('os')}/{m.platform.get('architecture')}" for m in manifests)
    raise ConvertError(f"{what}: the image index has no linux/{arch} image", hint=f"platforms: {found or 'none'}")
