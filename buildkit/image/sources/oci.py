"""``oci:PATH[:TAG]``: an OCI image layout folder; an index is resolved to this host's platform."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...config import limits
from ...errors import ConfigError, IntegrityError
from ...oci.layout import Descriptor, OciLayout, descriptor, json_object
from .base import INDEX_TYPES, Identity, LayerBlob, Materialized, Reader, Source, pick_platform, short


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


READERS: dict[str, Reader] = {"oci": lambda spec: OciLayoutSource(spec.text, spec.path or Path(), spec.ref)}
