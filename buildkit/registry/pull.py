"""``ckit pull``: a ``.sif``/``.sqsh`` artifact, verified into place, or with ``--to`` a plain image converted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..progress import SILENT, Reporter
from .artifacts import fetch_artifact_manifest, pull_artifact
from .client import Progress, RegistryClient
from .reference import Reference


def pull(client: RegistryClient, ref: Reference, out_dir: Path, *, to: str | None = None, insecure: bool = False,
         ca_file: Path | None = None, progress: Progress | None = None, reporter: Reporter = SILENT
         ) -> dict[str, Any]:
    _data, _digest, kind = fetch_artifact_manifest(client, ref)
    if kind is not None:
        if to is not None and to != kind.name:
            raise ConfigError(f"{ref} is a .{kind.name} artifact; --to {to} converts container images only",
                              hint=f"drop --to, or pull with --to {kind.name}")
        result = pull_artifact(client, ref, out_dir, progress)
        return {"path": str(result.path), "kind": result.kind, "digest": result.digest, "size": result.size,
                "reference": str(ref.with_digest(result.manifest_digest)), "annotations": result.annotations}
    if to is None:
        raise ConfigError(f"{ref} is a container image, not a .sif/.sqsh artifact",
                          hint="add --to sif or --to sqsh to convert it")
    return convert_image(ref, to, out_dir, insecure=insecure, ca_file=ca_file, reporter=reporter)


def convert_image(ref: Reference, to: str, out_dir: Path, *, insecure: bool, ca_file: Path | None,
                  reporter: Reporter = SILENT) -> dict[str, Any]:
    """Pull the image through the registry API and convert it (``buildkit.image.convert``, digest-checked)."""
    from ..image.convert import convert

    name = f"{ref.repository.rsplit('/', 1)[-1]}_{ref.tag or 'latest'}.{to}"
    out_dir.mkdir(parents=True, exist_ok=True)
    result = convert(f"docker://{ref}", to, output=out_dir / name, insecure=insecure, ca_file=ca_file,
                     progress=reporter)
    return {"path": str(result.path), "kind": to, "digest": None, "size": result.size,
            "reference": str(ref.with_digest(result.source_digest)) if result.source_digest.startswith("sha256:")
            else str(ref), "source_digest": result.source_digest, "annotations": {}}
