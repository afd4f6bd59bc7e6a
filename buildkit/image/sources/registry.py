"""``docker://REF``: an image read straight from a registry (OCI distribution API).

Identifying costs two small requests (manifest, config blob; an index is resolved to this host's
linux/<arch>). The layers are streams: the converter fetches several at once and decompresses
each as it arrives, checking its digest, into an uncompressed tar it then indexes and copies from.

The image layer knows no registry client: the reference, a way to reach the registry and the function that
fetches a blob's bytes are handed in (:mod:`buildkit.registry.source` does that with ckit's client and
:mod:`buildkit.registry.distribution.blobstream`), as the protocols below describe.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from ...config import limits
from ...errors import ConvertError, IntegrityError
from ...oci.layout import Descriptor, descriptor, json_object
from .base import INDEX_TYPES, Identity, LayerBlob, Materialized, Source, pick_platform, short


class ImageRef(Protocol):
    """A parsed ``[REGISTRY/]REPO[:TAG][@DIGEST]`` (:class:`buildkit.registry.distribution.reference.Reference`)."""

    @property
    def repository(self) -> str: ...
    @property
    def tag(self) -> str | None: ...
    @property
    def digest(self) -> str | None: ...
    @property
    def reference(self) -> str: ...
    @property
    def api_host(self) -> str: ...


class Manifest(Protocol):
    @property
    def media_type(self) -> str: ...

    def json(self) -> Any: ...


class Blob(Protocol):
    def read(self, amt: int | None = -1) -> bytes: ...


class BlobClient(Protocol):
    """What the source asks of a registry client (:class:`buildkit.registry.distribution.client.RegistryClient`)."""

    @property
    def authenticated(self) -> bool: ...  # it has credentials for the registry (the image may be private)

    def get_manifest(self, repo: str, reference: str, accept: str = ...) -> Manifest: ...
    def open_blob(self, repo: str, digest: str, size: int | None = None) -> AbstractContextManager[Blob]: ...


# (client, repository, digest, size) -> the blob's bytes in order, unverified (the converter checks the digest)
Chunks = Callable[[Any, str, str, int], Iterator[bytes]]


class RegistrySource(Source):
    def __init__(self, text: str, ref: ImageRef, connect: Callable[[], BlobClient], chunks: Chunks) -> None:
        self.text, self.image_ref = text, str(ref)
        self.ref = ref
        self._connect, self._chunks = connect, chunks
        self._client: BlobClient | None = None
        self._manifest: dict[str, Any] | None = None
        self._config: bytes | None = None

    @property
    def client(self) -> BlobClient:
        if self._client is None:
            self._client = self._connect()
        return self._client

    @property
    def private(self) -> bool:
        """Read with credentials: what is made of it is its user's alone."""
        return self.client.authenticated

    def manifest(self) -> dict[str, Any]:
        if self._manifest is None:
            repo = self.ref.repository
            manifest = self.client.get_manifest(repo, self.ref.reference)
            data = manifest.json()
            if manifest.media_type in INDEX_TYPES or "manifests" in data:
                entries = data.get("manifests") or []
                if not isinstance(entries, list):
                    raise IntegrityError(f"{self.text}: the image index's manifests must be a list")
                chosen = pick_platform([descriptor(e, f"{self.text}: image index entry") for e in entries], self.text)
                data = self.client.get_manifest(repo, chosen.digest).json()
            if "config" not in data or "layers" not in data:
                raise ConvertError(f"{self.text}: the registry returned no image manifest",
                                   hint="ckit converts container images (OCI or Docker v2 schema 2)")
            self._manifest = data
        return self._manifest

    def _descriptors(self, key: str) -> list[Descriptor]:
        value = self.manifest()[key]
        if key == "config":
            return [descriptor(value, f"{self.text}: manifest config")]
        if not isinstance(value, list):
            raise IntegrityError(f"{self.text}: manifest layers must be a list")
        return [descriptor(d, f"{self.text}: manifest layers[{n}]") for n, d in enumerate(value)]

    def identify(self) -> Identity:
        config_desc = self._descriptors("config")[0]
        if self._config is None:
            limit = limits.size("config_size")
            if config_desc.size > limit:
                raise IntegrityError(f"{self.text}: the image config is {config_desc.size} bytes, more than the "
                                     f"{limit} ckit reads", hint="CKIT_MAX_CONFIG_SIZE raises the limit")
            with self.client.open_blob(self.ref.repository, config_desc.digest, config_desc.size) as reader:
                self._config = reader.read()
            json_object(self._config, f"{self.text}: the image config")
        return Identity(self._config, config_desc.digest)

    def materialize(self, workdir: Path, progress: Callable[[int], None] | None = None) -> Materialized:
        """The layers as streams: nothing is downloaded here. Each layer's bytes are fetched when the converter
        prepares it (several layers at once, and large ones as several byte ranges at once,
        :mod:`buildkit.registry.distribution.blobstream`) and decompressed and checked as they arrive; only the decompressed
        tar is spooled, never the compressed blob."""
        config = self.identify().config or b""
        return Materialized(config, [
            LayerBlob(workdir / f"layer-{number}.tar", 0, desc.size, f"layer {number} ({short(desc.digest)})",
                      digest=desc.digest,
                      chunks=functools.partial(self._chunks, self.client, self.ref.repository, desc.digest, desc.size))
            for number, desc in enumerate(self._descriptors("layers"), start=1)])
