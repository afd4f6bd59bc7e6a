"""``ckit push SOURCE REF``: pick the way to push from the SOURCE form, then push.

| SOURCE | how |
|---|---|
| a `.sif` / `.sqsh` file | ORAS artifact (:mod:`.artifacts`) |
| `oci:PATH[:TAG]` | OCI layout through the registry API (:mod:`.images`) |
| `docker-archive:PATH` | docker save archive through the registry API |
| `docker-daemon:REF` | the engine's own push (:mod:`.daemon_push`) |
| a stack name | its newest build in the engine (label ``io.ckit.stack``), pushed by the engine |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from . import annotations as notes
from .artifacts import push_artifact
from .client import Progress, RegistryClient
from .reference import Reference


@dataclass(frozen=True)
class PushOptions:
    stack: str | None = None
    parameters: dict[str, Any] | None = None
    source_digest: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    recipes_dirs: tuple[Path, ...] = ()  # where stack names are looked up (the CLI's --recipes)


@dataclass(frozen=True)
class PushOutcome:
    source: str
    reference: str
    digest: str
    kind: str  # sif, sqsh, image
    size: int
    uploaded_bytes: int | None
    annotations: dict[str, str]

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "reference": self.reference, "digest": self.digest, "kind": self.kind,
                "size": self.size, "uploaded_bytes": self.uploaded_bytes, "annotations": self.annotations}


def _split_oci(rest: str) -> tuple[Path, str | None]:
    path, sep, tag = rest.rpartition(":")
    if sep and tag and "/" not in tag and Path(path).is_dir():
        return Path(path), tag
    return Path(rest), None


def push(client: RegistryClient, source: str, ref: Reference, options: PushOptions,
         progress: Progress | None = None) -> PushOutcome:
    recorded: dict[str, str] = {}

    def annotate(labels: dict[str, str]) -> dict[str, str]:
        recorded.update(notes.for_image(stack=options.stack, parameters=options.parameters,
                                        source_digest=options.source_digest, labels=labels,
                                        extra=options.extra))
        return recorded

    if source.startswith("oci:"):
        from .images import push_oci_layout

        path, tag = _split_oci(source[4:])
        result = push_oci_layout(client, ref, path, tag, annotate, progress)
    elif source.startswith("docker-archive:"):
        from .images import push_docker_archive

        path = Path(source[len("docker-archive:"):])
        if not path.is_file():
            raise ConfigError(f"{source}: no such file")
        result = push_docker_archive(client, ref, path, annotate, progress)
    elif source.startswith("docker-daemon:"):
        from .daemon_push import push_daemon_image

        result = push_daemon_image(client, source[len("docker-daemon:"):], ref, annotate)
    elif not Path(source).is_file() and _is_stack(source, options.recipes_dirs):
        from .daemon_push import push_daemon_image, stack_image

        sets = [f"{layer}.{k}={v}" for layer, values in (options.parameters or {}).items() for k, v in values.items()]
        fingerprint = _catalog(options.recipes_dirs).resolve(source, sets=sets).fingerprint
        image = stack_image(fingerprint)
        if image is None:
            again = " ".join(["ckit build", source, *(f"--set {s}" for s in sets)])
            raise ConfigError(f"stack {source} has no build in the engine (fingerprint {fingerprint[:12]})",
                              hint=f"run `{again}` first")
        result = push_daemon_image(client, image, ref, annotate)
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"push source {source!r} is neither a file, a stack nor an image source",
                              hint="give a .sif/.sqsh file, a stack name, oci:PATH[:TAG], docker-archive:PATH "
                                   "or docker-daemon:REF")
        from .artifacts import detect_kind

        kind = detect_kind(path)
        values = notes.for_artifact(path, kind.name, stack=options.stack, parameters=options.parameters,
                                    source_digest=options.source_digest, extra=options.extra)
        pushed = push_artifact(client, ref, path, values, progress)
        return PushOutcome(source, pushed.reference, pushed.digest, pushed.kind, pushed.size,
                           pushed.uploaded_bytes, values)
    return PushOutcome(source, result.reference, result.digest, "image", result.size, result.uploaded_bytes,
                       recorded)


def _catalog(recipes_dirs: tuple[Path, ...]):  # type: ignore[no-untyped-def]
    from ..recipe.catalog import Catalog

    return Catalog.from_dirs(recipes_dirs)


def _is_stack(name: str, recipes_dirs: tuple[Path, ...]) -> bool:
    return name in _catalog(recipes_dirs).stack_names()
