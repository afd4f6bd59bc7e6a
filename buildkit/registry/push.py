"""``ckit push SOURCE REF``: one push path, ckit's registry client, for every kind of source.

| SOURCE | read from | manifest (default) |
|---|---|---|
| a `.sif` / `.sqsh` file | the file, as one ORAS layer (:mod:`.artifacts`) | OCI (always) |
| `docker-archive:PATH[:REF]` | the archive; plain layers gzip-compressed on the way | Docker schema 2 |
| `docker-daemon:REF` | the engine's save stream, spooled to an archive | Docker schema 2 |
| a stack name | its newest build in the engine (label ``io.ckit.fingerprint``), as `docker-daemon:` | Docker schema 2 |
| `oci:PATH[:TAG]`, `oci-archive:PATH[:TAG]` | the layout (folder or tar), indexes included | the layout's own |

The engine never pushes: its own push would need the registry in ``registries.conf`` for plain http, and its
own credentials. Through ckit's client every source gets the same auth, http-on-loopback, ``--insecure`` and
``--ca-file`` rules. ``--format docker|oci`` overrides the manifest type of images (SOURCE grammar:
:mod:`buildkit.oci.sources`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..oci.sources import SourceSpec, form_of, parse_spec, syntaxes
from ..store import default_root
from . import annotations as notes
from .artifacts import push_artifact
from .client import Progress, RegistryClient
from .images import ImageInput, Pushed, check_format, push_image
from .layers import Uploader
from .reference import Reference


@dataclass(frozen=True)
class PushOptions:
    stack: str | None = None
    parameters: dict[str, Any] | None = None
    source_digest: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    format: str | None = None  # "docker" | "oci" | None: as the source has it

    @property
    def annotated(self) -> bool:
        """The user asked for annotations (which only an OCI manifest can carry)."""
        return bool(self.stack or self.parameters or self.source_digest or self.extra)


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
    check_format(options.format)
    if form_of(source) is not None:
        return push_image_source(client, parse_spec(source), ref, options, progress, total)
    path = Path(source)
    if path.is_file():
        return _push_file(client, path, ref, options, progress, total)
    if _is_stack(source):
        image = _stack_image(source, options)
        spec = SourceSpec("docker-daemon", source, ref=image)
        return push_image_source(client, spec, ref, options, progress, total)
    raise ConfigError(f"push source {source!r} is neither a file, a stack nor an image source",
                      hint="give a .sif/.sqsh file, a stack name (see `ckit recipes`), or one of: "
                           + ", ".join(s for s in syntaxes() if not s.startswith("docker://")))


def _push_file(client: RegistryClient, path: Path, ref: Reference, options: PushOptions,
               progress: Progress | None, total: Total | None) -> PushOutcome:
    from .artifacts import detect_kind

    if options.format == "docker":
        raise ConfigError(f"--format docker: {path} is pushed as an ORAS artifact, which is always OCI",
                          hint="drop --format for .sif and .sqsh files")
    kind = detect_kind(path)
    values = notes.for_artifact(path, kind.name, stack=options.stack, parameters=options.parameters,
                                source_digest=options.source_digest, extra=options.extra)
    if total:
        total(path.stat().st_size)
    pushed = push_artifact(client, ref, path, values, progress)
    return PushOutcome(str(path), pushed.reference, pushed.digest, pushed.kind, pushed.size,
                       pushed.uploaded_bytes, values, pushed.media_type)


@contextmanager
def _spool() -> Iterator[Path]:
    """A work folder under ckit's cache dir (compressed layers, an engine's save), removed afterwards."""
    base = default_root() / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="push-", dir=base) as folder:
        yield Path(folder)


def push_image_source(client: RegistryClient, spec: SourceSpec, ref: Reference, options: PushOptions,
                      progress: Progress | None = None, total: Total | None = None) -> PushOutcome:
    """Push an image SOURCE (any form but ``docker://``) through ckit's client."""
    if spec.form == "docker":
        raise ConfigError(f"{spec.text}: ckit pushes local images; a registry-to-registry copy is not one",
                          hint=f"copy it with `skopeo copy {spec.text} docker://{ref}`")
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
            pushed = _READERS[spec.form](client, spec, ref, options.format, uploader, annotate, spool, total)
            sent = uploader.finish()
        except BaseException:
            uploader.abort()
            raise
    said = []
    kept = recorded if pushed.media_type.startswith("application/vnd.oci.") else {}
    if not kept and options.annotated:
        said.append("a Docker schema 2 manifest carries no annotations: --stack/--set/--source-digest/--annotation "
                    "were not recorded (push with --format oci to record them)")
    return PushOutcome(spec.text, str(ref.with_digest(pushed.digest)), pushed.digest, "image", pushed.size, sent,
                       kept, pushed.media_type, said)


def _tell(total: Total | None, image: Any) -> None:
    if total:
        total(len(image.config) + sum(layer.size for layer in image.layers))


def _from_archive(client: RegistryClient, spec: SourceSpec, ref: Reference, fmt: str | None, uploader: Uploader,
                  annotate: Annotate, spool: Path, total: Total | None) -> Pushed:
    from .image_sources import from_docker_archive

    if spec.path is None or not spec.path.is_file():
        raise ConfigError(f"{spec.text}: no such file", hint="give the path of a `docker save` archive")
    image = from_docker_archive(spec.path, spec.ref, spec.text)
    _tell(total, image)
    return push_image(client, ref.repository, ref.tag or ref.reference, image, fmt, uploader, annotate(image))


def _from_daemon(client: RegistryClient, spec: SourceSpec, ref: Reference, fmt: str | None, uploader: Uploader,
                 annotate: Annotate, spool: Path, total: Total | None) -> Pushed:
    """The engine's image, read out of the engine as a save stream into the spool, then pushed as an archive."""
    from ..image.source import DaemonSource
    from .image_sources import from_docker_archive

    archive = DaemonSource(spec.text, spec.ref or "").spool(spool)
    image = from_docker_archive(archive.path, None, spec.text)
    _tell(total, image)
    return push_image(client, ref.repository, ref.tag or ref.reference, image, fmt, uploader, annotate(image))


def _from_layout(client: RegistryClient, spec: SourceSpec, ref: Reference, fmt: str | None, uploader: Uploader,
                 annotate: Annotate, spool: Path, total: Total | None) -> Pushed:
    from ..oci.archive import OciArchive
    from ..oci.layout import OciLayout
    from .image_sources import LayoutPush

    path = spec.path or Path()
    layout = OciArchive(path, spec.text) if spec.form == "oci-archive" else OciLayout(path, spec.text)
    return LayoutPush(client, ref.repository, layout, fmt, uploader, annotate).run(spec.ref, ref.tag or ref.reference)


# How each form of the SOURCE grammar is pushed, by the form's name.
_READERS = {"docker-archive": _from_archive, "docker-daemon": _from_daemon, "oci": _from_layout,
            "oci-archive": _from_layout}


def _catalog():  # type: ignore[no-untyped-def]
    from ..recipe.catalog import Catalog

    return Catalog.from_settings()


def _is_stack(name: str) -> bool:
    return name in _catalog().stack_names()


def _stack_image(stack: str, options: PushOptions) -> str:
    """The engine's image of the stack's current build (its fingerprint), or a ConfigError saying how to build it."""
    sets = [f"{layer}.{k}={v}" for layer, values in (options.parameters or {}).items() for k, v in values.items()]
    fingerprint = _catalog().resolve(stack, sets=sets).fingerprint
    from .engine_images import stack_image

    image = stack_image(fingerprint)
    if image is None:
        again = " ".join(["ckit build", stack, *(f"--set {s}" for s in sets)])
        raise ConfigError(f"stack {stack} has no build in the engine (fingerprint {fingerprint[:12]})",
                          hint=f"run `{again}` first")
    return image
