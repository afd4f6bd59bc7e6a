"""``docker://REF`` as a conversion source: the image layer's :class:`~buildkit.image.sources.registry.RegistrySource`
reading through ckit's registry client. The image layer sits below this package and knows no client; commands
and pulls pass :func:`reader` down (``convert.plan(..., registry=reader(...))``)."""

from __future__ import annotations

from pathlib import Path

from ..image.sources.base import Reader, Source
from ..image.sources.named import parse_source
from ..image.sources.registry import RegistrySource
from ..oci.sources import SourceSpec
from .distribution.blobstream import blob_chunks
from .distribution.client import RegistryClient
from .distribution.reference import parse


def reader(*, insecure: bool = False, ca_file: Path | None = None) -> Reader:
    """The reader of ``docker://`` SOURCEs: plain http / no TLS check with ``insecure``, ``ca_file`` as CA bundle."""

    def read(spec: SourceSpec) -> Source:
        ref = parse(spec.ref or "")
        return RegistrySource(spec.text, ref, lambda: RegistryClient.for_reference(ref, insecure=insecure,
                                                                                    ca_file=ca_file), blob_chunks)

    return read


def open_source(text: str, *, insecure: bool = False, ca_file: Path | None = None) -> Source:
    """Any SOURCE, ``docker://`` included."""
    return parse_source(text, registry=reader(insecure=insecure, ca_file=ca_file))
