"""``ckit pull``: a ``.sif``/``.sqsh`` artifact, verified into place, or with ``--to`` a plain image converted.

Plan, then execute: the plan reads the manifest once (what the reference points at, by digest, and whether it
is an artifact or an image); the execution uses that manifest (an image is read by its digest), so a tag moved
in between changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..image.convert import convert
from ..progress import SILENT, Reporter
from .distribution.client import Progress, RegistryClient
from .distribution.reference import Reference
from .source import reader
from .transfer.artifacts import ArtifactKind, fetch_artifact_manifest, pull_artifact


@dataclass(frozen=True)
class PullPlan:
    ref: Reference  # as given
    manifest_digest: str  # what it pointed at when planned
    kind: ArtifactKind | None  # None: a container image (converted with --to)
    to: str | None
    size: int | None  # the artifact's bytes; None for an image
    manifest: dict[str, Any] = field(default_factory=dict, repr=False)  # as fetched (verified) by the plan

    @property
    def pinned(self) -> Reference:
        return self.ref.with_digest(self.manifest_digest)


def plan(client: RegistryClient, ref: Reference, to: str | None = None) -> PullPlan:
    data, digest, kind = fetch_artifact_manifest(client, ref)
    if kind is not None:
        if to is not None and to != kind.name:
            raise ConfigError(f"{ref} is a .{kind.name} artifact; --to {to} converts container images only",
                              hint=f"drop --to, or pull with --to {kind.name}")
        sizes = [x.get("size") for x in data.get("layers") or [] if isinstance(x, dict)
                 and x.get("mediaType") in kind.layer_types()]
        size = sizes[0] if len(sizes) == 1 and isinstance(sizes[0], int) else None
        return PullPlan(ref, digest, kind, None, size, data)
    if to is None:
        raise ConfigError(f"{ref} is a container image, not a .sif/.sqsh artifact",
                          hint="add --to sif or --to sqsh to convert it")
    return PullPlan(ref, digest, None, to, None, data)


def execute(client: RegistryClient, planned: PullPlan, out_dir: Path, *, insecure: bool = False,
            ca_file: Path | None = None, progress: Progress | None = None,
            total: Callable[[int], None] | None = None, reporter: Reporter = SILENT) -> dict[str, Any]:
    """Fetch what the plan found: the artifact's file, or the image converted (through the store)."""
    if planned.kind is None:
        return convert_image(planned, out_dir, insecure=insecure, ca_file=ca_file, reporter=reporter)
    result = pull_artifact(client, planned.ref, out_dir, progress, total=total,
                           manifest=(planned.manifest, planned.manifest_digest, planned.kind))
    return {"path": str(result.path), "kind": result.kind, "digest": result.digest, "size": result.size,
            "reference": str(planned.ref.with_digest(result.manifest_digest)), "annotations": result.annotations}


def pull(client: RegistryClient, ref: Reference, out_dir: Path, *, to: str | None = None, insecure: bool = False,
         ca_file: Path | None = None, progress: Progress | None = None, reporter: Reporter = SILENT
         ) -> dict[str, Any]:
    return execute(client, plan(client, ref, to), out_dir, insecure=insecure, ca_file=ca_file, progress=progress,
                   reporter=reporter)


def convert_image(planned: PullPlan, out_dir: Path, *, insecure: bool, ca_file: Path | None,
                  reporter: Reporter = SILENT) -> dict[str, Any]:
    """Pull the image through the registry API and convert it (``buildkit.image.convert``, digest-checked).

    The image is read by the digest the plan found, which is the result's ``digest`` (what was pulled; the file
    is made from it), next to ``source_digest``, the image's config digest."""
    ref, to = planned.ref, planned.to or "sif"
    name = f"{ref.repository.rsplit('/', 1)[-1]}_{ref.tag or 'latest'}.{to}"
    out_dir.mkdir(parents=True, exist_ok=True)
    result = convert(f"docker://{planned.pinned}", to, output=out_dir / name,
                     registry=reader(insecure=insecure, ca_file=ca_file), progress=reporter)
    return {"path": str(result.path), "kind": to, "digest": planned.manifest_digest, "size": result.size,
            "reference": str(planned.pinned), "source_digest": result.source_digest, "annotations": {}}
