"""The plan of a ``ckit push``: what SOURCE is, what will go up and as which manifest, without the registry.

``ckit push --dry-run`` prints it. Planning reads only what is cheap: a file's size and kind, an archive's
index and config, a layout's index and manifest, the engine's record of an image (no save). Layers are listed
with what will happen to them: sent as the source holds them, or gzip-compressed first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..oci.layout import json_object
from ..oci.sources import SourceSpec, form_of, parse_spec, syntaxes
from ..recipe.catalog import Catalog
from .distribution.reference import Reference
from .transfer.images import FORMATS, MANIFEST_TYPE, check_format, format_of


@dataclass(frozen=True)
class PushPlan:
    source: str  # as the user wrote it
    kind: str  # sif, sqsh, or the SOURCE form: docker-archive, docker-daemon, oci, oci-archive; "stack"
    reference: str
    spec: SourceSpec | None  # the image source to read (None for a .sif/.sqsh file)
    media_type: str | None  # the manifest type that will be pushed (None: each manifest of a layout keeps its own)
    size: int | None  # bytes the source holds (layers as stored there), when known without reading them
    layers: list[dict[str, Any]] = field(default_factory=list)
    engine_image: str | None = None  # the engine's image ID (stacks, docker-daemon:)
    layer_type: str | None = None  # a .sif/.sqsh file's layer media type

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "reference": self.reference,
                "media_type": self.media_type, "size": self.size, "layers": self.layers,
                "engine_image": self.engine_image}


def plan(source: str, ref: Reference, fmt: str | None, sets: list[str] | None = None,
         recipes_dirs: tuple[Path, ...] = (), sif_layer_type: str | None = None) -> PushPlan:
    """Classify SOURCE (image form, file, stack) and describe the push; ConfigError when it is none of them.
    ``sif_layer_type``: the layer media type of a .sif (default: the one every Singularity/Apptainer pulls)."""
    check_format(fmt)
    if form_of(source) is not None:
        return _plan_image(parse_spec(source), source, ref, fmt, "")
    path = Path(source)
    if path.is_file():
        return _plan_file(path, ref, fmt, sif_layer_type)
    catalog = _catalog(recipes_dirs)
    if source in catalog.stack_names():
        image = stack_image_of(catalog, source, sets or [])
        return _plan_image(SourceSpec("docker-daemon", source, ref=image), source, ref, fmt, "stack")
    raise ConfigError(f"push source {source!r} is neither a file, a stack nor an image source",
                      hint="give a .sif/.sqsh file, a stack name (see `ckit recipes`), or one of: "
                           + ", ".join(s for s in syntaxes() if not s.startswith("docker://")))


def _plan_file(path: Path, ref: Reference, fmt: str | None, sif_layer_type: str | None) -> PushPlan:
    from .transfer.artifacts import SIF, detect_kind

    if fmt == "docker":
        raise ConfigError(f"--format docker: {path} is pushed as an ORAS artifact, which is always OCI",
                          hint="drop --format for .sif and .sqsh files")
    kind = detect_kind(path)
    size = path.stat().st_size
    layer_type = (sif_layer_type if kind is SIF else None) or kind.layer_type
    layer = {"what": path.name, "media_type": layer_type, "size": size, "action": "send as it is"}
    return PushPlan(str(path), kind.name, str(ref), None, MANIFEST_TYPE["oci"], size, [layer],
                    layer_type=layer_type)


# The SOURCE forms ckit pushes (by name in the grammar, buildkit.oci.sources); docker:// is a registry already.
PUSHED_FORMS = ("docker-archive", "docker-daemon", "oci", "oci-archive")


def _plan_image(spec: SourceSpec, source: str, ref: Reference, fmt: str | None, kind: str) -> PushPlan:
    if spec.form not in PUSHED_FORMS:
        raise ConfigError(f"{spec.text}: ckit pushes local images; a registry-to-registry copy is not one",
                          hint=f"copy it with `skopeo copy {spec.text} docker://{ref}`")
    kind = kind or spec.form
    if spec.form == "docker-daemon":
        from .transfer.engine_images import image_record

        image_id, size = image_record(spec)
        return PushPlan(source, kind, str(ref), SourceSpec("docker-daemon", spec.text, ref=image_id),
                        MANIFEST_TYPE[fmt or "docker"], size, [], image_id)
    if spec.form == "docker-archive":
        from .transfer.image_sources import from_docker_archive

        if spec.path is None or not spec.path.is_file():
            raise ConfigError(f"{spec.text}: no such file", hint="give the path of a `docker save` archive")
        image = from_docker_archive(spec.path, spec.ref, spec.text)
        layers = [_layer(x) for x in image.layers]
        return PushPlan(source, kind, str(ref), spec, MANIFEST_TYPE[fmt or "docker"],
                        len(image.config) + sum(x.size for x in image.layers), layers)
    return _plan_layout(spec, source, ref, fmt, kind)


def _plan_layout(spec: SourceSpec, source: str, ref: Reference, fmt: str | None, kind: str) -> PushPlan:
    from .transfer.image_sources import layout_image, open_layout, select

    layout = open_layout(spec)
    top = select(layout, spec.ref)
    data = layout.read_blob(top)
    body = json_object(data, f"{layout.what}: manifest {top.digest}")
    media_type = top.media_type or str(body.get("mediaType") or "")
    if "manifests" in body:  # an index: each image under it is read when it is pushed
        return PushPlan(source, kind, str(ref), spec, None if fmt is None else MANIFEST_TYPE[fmt], None,
                        [{"what": f"{len(body['manifests'])} manifests of the index", "action": "read when pushed"}])
    image = layout_image(layout, top, body, data)
    chosen = fmt or format_of(media_type)
    return PushPlan(source, kind, str(ref), spec, MANIFEST_TYPE[chosen if chosen in FORMATS else "oci"],
                    len(image.config) + sum(x.size for x in image.layers), [_layer(x) for x in image.layers])


def _layer(layer: Any) -> dict[str, Any]:
    action = "gzip, then send" if layer.compression == "tar" else "send as it is"
    return {"what": layer.what, "size": layer.size, "compression": layer.compression, "action": action}


def _catalog(recipes_dirs: tuple[Path, ...]) -> Catalog:
    return Catalog.from_dirs(recipes_dirs)


def stack_image_of(catalog: Any, stack: str, sets: list[str]) -> str:
    """The engine's image of the stack's current build (its fingerprint), or a ConfigError saying how to build it."""
    from .transfer.engine_images import stack_image

    fingerprint = catalog.resolve(stack, sets=sets).fingerprint
    image = stack_image(fingerprint)
    if image is None:
        again = " ".join(["ckit build", stack, *(f"--set {s}" for s in sets)])
        raise ConfigError(f"stack {stack} has no build in the engine (fingerprint {fingerprint[:12]})",
                          hint=f"run `{again}` first")
    return image
