"""``ckit push SOURCE REF``: one push path, ckit's registry client, for every kind of source.

| SOURCE | read from | manifest (default) |
|---|---|---|
| a `.sif` / `.sqsh` file | the file, as one ORAS layer (:mod:`.transfer.artifacts`) | OCI (always) |
| `docker-archive:PATH[:REF]` | the archive; plain layers gzip-compressed on the way | Docker schema 2 |
| `docker-daemon:REF` | the engine's save stream, spooled to an archive | Docker schema 2 |
| a stack name | its newest build in the engine (label ``io.ckit.fingerprint``), as `docker-daemon:` | Docker schema 2 |
| `oci:PATH[:TAG]`, `oci-archive:PATH[:TAG]` | the layout (folder or tar), indexes included | the layout's own |

The engine never pushes: its own push would need the registry in ``registries.conf`` for plain http, and its
own credentials. Through ckit's client every source gets the same auth, http-on-loopback, ``--insecure`` and
``--ca-file`` rules. ``--format docker|oci`` overrides the manifest type of images (SOURCE grammar:
:mod:`buildkit.oci.sources`). Plan (:mod:`.push_plan`, what ``--dry-run`` prints), then execute.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..image.sources.docker_daemon import DaemonSource
from ..storage.store import default_root
from .distribution.client import Progress, RegistryClient
from .distribution.reference import Reference
from .push_plan import PushPlan, plan
from .transfer import annotations as notes
from .transfer.artifacts import push_artifact
from .transfer.images import ImageInput, Pushed, push_image
from .transfer.layers import Uploader


@dataclass(frozen=True)
class PushOptions:
    stack: str | None = None
    parameters: dict[str, Any] | None = None
    source_digest: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    format: str | None = None  # "docker" | "oci" | None: as the source has it
    recipes_dirs: tuple[Path, ...] = ()  # where stack names are looked up (the CLI's --recipes)

    @property
    def annotated(self) -> bool:
        """The user asked for annotations (which only an OCI manifest can carry)."""
        return bool(self.stack or self.parameters or self.source_digest or self.extra)

    @property
    def sets(self) -> list[str]:
        return [f"{layer}.{k}={v}" for layer, values in (self.parameters or {}).items() for k, v in values.items()]


@dataclass(frozen=True)
class PushOutcome:
    source: str
    reference: str
    digest: str
    kind: str  # sif, sqsh, image
    size: int
    uploaded_bytes: int
    annotations: dict[str, str]
    media_type: str
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "reference": self.reference, "digest": self.digest, "kind": self.kind,
                "media_type": self.media_type, "size": self.size, "uploaded_bytes": self.uploaded_bytes,
                "annotations": self.annotations, "notes": self.notes}


Total = Callable[[int], None]  # told the number of source bytes a push will read, once it knows
Annotate = Callable[[ImageInput | None], dict[str, str]]


def push(client: RegistryClient, source: str, ref: Reference, options: PushOptions,
         progress: Progress | None = None, total: Total | None = None) -> PushOutcome:
    return execute(client, plan(source, ref, options.format, options.sets, options.recipes_dirs), ref, options,
                   progress, total)


def execute(client: RegistryClient, planned: PushPlan, ref: Reference, options: PushOptions,
            progress: Progress | None = None, total: Total | None = None) -> PushOutcome:
    if total and planned.size:
        total(planned.size)
    if planned.spec is None:  # a .sif / .sqsh file
        path = Path(planned.source)
        values = notes.for_artifact(path, planned.kind, stack=options.stack, parameters=options.parameters,
                                    source_digest=options.source_digest, extra=options.extra)
        pushed = push_artifact(client, ref, path, values, progress, planned.layer_type)
        return PushOutcome(str(path), pushed.reference, pushed.digest, pushed.kind, pushed.size,
                           pushed.uploaded_bytes, values, pushed.media_type)
    return _push_image(client, planned, ref, options, progress, total)


@contextmanager
def _spool() -> Iterator[Path]:
    """A work folder under ckit's cache dir (compressed layers, an engine's save), removed afterwards."""
    base = default_root() / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="push-", dir=base) as folder:
        yield Path(folder)


def _push_image(client: RegistryClient, planned: PushPlan, ref: Reference, options: PushOptions,
                progress: Progress | None, total: Total | None) -> PushOutcome:
    recorded: dict[str, str] = {}

    def annotate(image: ImageInput | None) -> dict[str, str]:
        recorded.update(notes.for_image(stack=options.stack, parameters=options.parameters,
                                        source_digest=options.source_digest, extra=options.extra,
                                        labels=image.labels if image else None,
                                        created=image.created if image else None))
        return recorded

    with _spool() as spool:
        uploader = Uploader(client, ref.repository, spool, progress)
        try:
            pushed = _read_and_push(client, planned, ref, options.format, uploader, annotate, spool, total)
            sent = uploader.finish()
        except BaseException:
            uploader.abort()
            raise
    said = []
    kept = recorded if pushed.media_type.startswith("application/vnd.oci.") else {}
    if not kept and options.annotated:
        said.append("a Docker schema 2 manifest carries no annotations: --stack/--set/--source-digest/--annotation "
                    "were not recorded (push with --format oci to record them)")
    return PushOutcome(planned.source, str(ref.with_digest(pushed.digest)), pushed.digest, "image", pushed.size,
                       sent, kept, pushed.media_type, said)


def _read_and_push(client: RegistryClient, planned: PushPlan, ref: Reference, fmt: str | None, uploader: Uploader,
                   annotate: Annotate, spool: Path, total: Total | None) -> Pushed:
    """Read the image out of its source (an engine's image through its save stream) and push it."""
    from .transfer.image_sources import LayoutPush, from_docker_archive, open_layout

    spec = planned.spec
    assert spec is not None  # noqa: S101 - files are pushed by execute()
    reference = ref.tag or ref.reference
    if spec.form in ("oci", "oci-archive"):
        return LayoutPush(client, ref.repository, open_layout(spec), fmt, uploader, annotate).run(spec.ref, reference)
    if spec.form == "docker-daemon":
        archive = DaemonSource(spec.text, spec.ref or "").spool(spool, progress=uploader.progress)
        image = from_docker_archive(archive.path, None, planned.source)
        if total:  # the save stream read so far, then the layers to compress
            total(archive.path.stat().st_size + len(image.config) + sum(layer.size for layer in image.layers))
    else:
        image = from_docker_archive(spec.path or Path(), spec.ref, spec.text)
    return push_image(client, ref.repository, reference, image, fmt, uploader, annotate(image))
