"""``ckit build``: plan (pure, printable with --dry-run), then execute with an engine and the converter.

The build key is the sha256 of the rendered build context (every file, including the Dockerfile or .def,
which carry the base reference and the recipe labels). An image in the engine whose ``io.ckit.build.key``
label equals it is a cache hit: nothing is built. Conversions hit the artifact store the same way.
``--no-cache`` and ``--pull`` build even then, and pass on to the engine (docker's meaning of both).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..engine.base import BuildEvent, BuildListener, BuildRequest, BuiltImage, Engine, context_digest
from ..engine.select import AUTO_ORDER, Selection, get_engine, select_engine
from ..errors import BuildError, ConfigError
from ..fs.files import check_output
from ..image.convert import TARGETS as CONVERTED
from ..image.convert import convert_many
from ..image.sources.docker_daemon import DaemonSource
from ..oci import labels as keys
from ..progress import SILENT, Meter, Reporter
from ..recipe.catalog import Catalog
from ..registry.distribution.reference import parse
from ..render.context import ContextFile, build_context
from ..storage.store import export
from .basepull import BaseSource, explain
from .locked import check_lock, read_lock

if TYPE_CHECKING:
    from ..site.model import Site

TARGETS = ("image", *CONVERTED)  # the engine's image, then what conversion makes of it
# What each engine's product can become: the docker engine makes an OCI image that converts to anything;
# the apptainer engine writes a .sif directly and nothing else.
TARGETS_BY_PRODUCT = {"image": TARGETS, "sif": ("sif",)}
DEFAULT_TARGET = {"image": "image", "sif": "sif"}

LABEL_STACK, LABEL_PARAMETERS, LABEL_VERSION = keys.STACK, keys.PARAMETERS, keys.VERSION
LABEL_FINGERPRINT, LABEL_BASE_DIGEST = keys.FINGERPRINT, keys.BASE_DIGEST


def parse_targets(text: str | None, product: str) -> tuple[str, ...]:
    """``--to image,sif,sqsh`` -> the targets in canonical order; checks what the engine's product allows."""
    if text is None:
        return (DEFAULT_TARGET[product],)
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in names if t not in TARGETS]
    if unknown or not names:
        what = ", ".join(unknown) if unknown else repr(text)
        raise ConfigError(f"--to: unknown target {what}",
                          hint=f"choose from {','.join(TARGETS)}, comma-separated")
    allowed = TARGETS_BY_PRODUCT[product]
    refused = [t for t in names if t not in allowed]
    if refused:
        raise ConfigError(f"--to {','.join(refused)}: the selected engine builds a .{product} only",
                          hint="use --engine docker (it builds an OCI image that converts to sif and sqsh)")
    return tuple(t for t in TARGETS if t in names)


def default_tag(stack: str, fingerprint: str, base_override: str | None) -> str:
    suffix = "-locked" if base_override else ""
    return f"localhost/ckit/{stack}:{fingerprint[:12]}{suffix}"


@dataclass(frozen=True)
class Output:
    kind: str  # sif | sqsh
    path: Path


@dataclass(frozen=True)
class BuildPlan:
    stack: str
    fingerprint: str
    engine: str
    engine_reason: str
    product: str
    tag: str
    build_key: str
    base_image: str
    base_override: str | None
    labels: tuple[tuple[str, str], ...]
    context_files: tuple[tuple[str, int], ...]
    targets: tuple[str, ...]
    outputs: tuple[Output, ...]
    cached: bool | None = None  # None until the engine was asked
    no_cache: bool = False  # every step runs again
    pull: bool = False  # the base image is pulled again
    source: BaseSource | None = field(default=None, compare=False)  # the base and the line: a failed pull's hint

    def request(self, context: Sequence[ContextFile]) -> BuildRequest:
        return BuildRequest(context=context, key=self.build_key, tag=self.tag, labels=dict(self.labels),
                            no_cache=self.no_cache, pull=self.pull)

    @property
    def reuses(self) -> bool:
        """Whether an earlier build with the same key may stand for this one (not when asked to build again)."""
        return not (self.no_cache or self.pull)

    @property
    def product_name(self) -> str:
        return self.tag if self.product == "image" else f".sif in the artifact store (key {self.build_key[:12]})"

    def as_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack, "fingerprint": self.fingerprint, "engine": self.engine,
            "engine_reason": self.engine_reason, "tag": self.tag, "build_key": self.build_key,
            "base_image": self.base_image, "base_override": self.base_override, "labels": dict(self.labels),
            "context": [{"path": p, "size": s} for p, s in self.context_files], "targets": list(self.targets),
            "outputs": [{"kind": o.kind, "path": str(o.path)} for o in self.outputs], "cached": self.cached,
            "no_cache": self.no_cache, "pull": self.pull,
        }

    def describe(self) -> str:
        """The plan as text, one action a line (what --dry-run prints)."""
        product = self.product_name
        first = f"reuse {product} (cache hit: no build work)" if self.cached else f"build {product}"
        again = [flag for flag, on in (("--no-cache", self.no_cache), ("--pull", self.pull)) if on]
        first += f" ({' '.join(again)}: even if built before)" if again else ""
        lines = [f"plan: build {self.stack} with {self.engine_reason}",
                 f"  fingerprint  {self.fingerprint}",
                 f"  build key    {self.build_key}",
                 f"  base         {self.base_override or self.base_image}",
                 "  context      " + ", ".join(f"{p} ({s} B)" for p, s in self.context_files),
                 f"  1. {first}"]
        for number, output in enumerate(self.outputs, start=2):
            action = "copy the .sif" if self.product == output.kind else f"convert {self.tag} to .{output.kind}"
            lines.append(f"  {number}. {action} -> {output.path}")
        if self.labels:
            lines.append("  labels added by the engine")
            lines += [f"    {k}={v}" for k, v in self.labels]
        return "\n".join(lines) + "\n"


def engine_labels(resolved: Any, base_override: str | None) -> tuple[tuple[str, str], ...]:
    """Labels the engine adds to the recipe's own: those the renderer did not set, the base digest of a
    locked build; the engine itself adds the build key."""
    recipe_labels = dict(resolved.labels)
    wanted = {
        LABEL_STACK: resolved.stack,
        LABEL_PARAMETERS: json.dumps(resolved.parameters, sort_keys=True, separators=(",", ":"), default=str),
        LABEL_VERSION: __version__,
        LABEL_FINGERPRINT: resolved.fingerprint,
    }
    labels = {k: v for k, v in wanted.items() if k not in recipe_labels}
    if base_override and "@" in base_override:
        labels[LABEL_BASE_DIGEST] = base_override.split("@", 1)[1]
    return tuple(sorted(labels.items()))


def plan_build(
    resolved: Any,
    context: Sequence[ContextFile],
    *,
    engine: str,
    engine_reason: str,
    product: str,
    targets: Sequence[str],
    output_dir: Path,
    tag: str | None = None,
    base_override: str | None = None,
    no_cache: bool = False,
    pull: bool = False,
    sets: Sequence[str] = (),
    ngc: str | None = None,
) -> BuildPlan:
    """Everything ``execute`` will do, computed from its inputs alone (``sets``, ``ngc``: the line's, which the
    hint of a base the engine cannot fetch repeats)."""
    build_key = context_digest(context)
    stem = f"{resolved.stack}-{resolved.fingerprint[:12]}{'-locked' if base_override else ''}"
    file_outputs = tuple(Output(t, output_dir / f"{stem}.{t}") for t in targets if t != "image")
    return BuildPlan(
        stack=resolved.stack,
        fingerprint=resolved.fingerprint,
        engine=engine,
        engine_reason=engine_reason,
        product=product,
        tag=tag or default_tag(resolved.stack, resolved.fingerprint, base_override),
        build_key=build_key,
        base_image=resolved.base_image,
        base_override=base_override,
        labels=engine_labels(resolved, base_override),
        context_files=tuple((f.path, len(f.data)) for f in context),
        targets=tuple(targets),
        outputs=file_outputs,
        no_cache=no_cache,
        pull=pull,
        source=BaseSource(resolved.stack, base_override or resolved.base_image, resolved.base.name,
                          _registry(resolved.base.params), tuple(sets), ngc, base_override is not None),
    )


def _registry(params: Sequence[tuple[str, Any]]) -> str | None:
    """The value of a base's ``registry`` parameter (debian, ubuntu), None when it has none."""
    value = dict(params).get("registry")
    return value if isinstance(value, str) else None


def check_cache(plan: BuildPlan, engine: Engine, context: Sequence[ContextFile]) -> tuple[BuildPlan, BuiltImage | None]:
    hit = engine.cached(plan.request(context)) if plan.reuses else None
    return replace(plan, cached=hit is not None), hit


@dataclass(frozen=True)
class ArtifactResult:
    kind: str
    location: str
    digest: str | None
    size: int | None
    seconds: float
    cache_hit: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        key = "ref" if self.kind == "image" else "path"
        return {"kind": self.kind, key: self.location, "digest": self.digest, "size": self.size,
                "seconds": round(self.seconds, 3), "cache_hit": self.cache_hit, **self.extra}


@dataclass(frozen=True)
class BuildResult:
    plan: BuildPlan
    artifacts: tuple[ArtifactResult, ...]
    seconds: float

    def as_json(self) -> dict[str, Any]:
        return {"stack": self.plan.stack, "engine": self.plan.engine, "tag": self.plan.tag,
                "fingerprint": self.plan.fingerprint, "build_key": self.plan.build_key,
                "artifacts": [a.as_json() for a in self.artifacts], "seconds": round(self.seconds, 3)}


def execute(
    plan: BuildPlan,
    engine: Engine,
    context: Sequence[ContextFile],
    listener: BuildListener = lambda event: None,
    *,
    cached: BuiltImage | None = None,
    on_phase: Callable[[str], None] = lambda message: None,
    progress: Reporter = SILENT,
    site: Site | None = None,
) -> BuildResult:
    """Build (unless an earlier build of the same key is there), then produce every output of the plan.
    ``listener`` gets every line of the engine's log; ``progress`` shows the build steps and conversions;
    ``site``: the squashfs compression is one its runtime can mount."""
    started = time.monotonic()
    for output in plan.outputs:  # before building: an output ckit may not replace fails fast
        check_output(output.path, flag="-o")
    if cached is None and plan.reuses:
        cached = engine.cached(plan.request(context))
    if cached is not None:
        on_phase(f"cache hit: {cached.ref} has build key {plan.build_key[:12]}; nothing to build")
        built = cached
    else:
        on_phase(f"building {plan.stack} with {plan.engine} -> {plan.product_name}")
        with progress.meter(f"building {plan.stack}", unit="steps") as meter:
            meter.describe(f"building {plan.stack}: starting")
            try:
                built = engine.build(plan.request(context), _metered(plan.stack, listener, meter))
            except BuildError as err:  # a base the engine could not fetch: the hint says how to build anyway
                if plan.source is None or (better := explain(err, plan.source)) is err:
                    raise
                raise better from err
    artifacts = []
    if plan.product == "image":
        artifacts.append(ArtifactResult("image", built.ref, built.image_id, built.size, built.seconds,
                                        built.cache_hit))
    conversions = []
    for output in plan.outputs:
        if plan.product == output.kind:
            artifacts.append(place_file(Path(built.ref), output, seconds=built.seconds, cache_hit=built.cache_hit))
        else:
            output.path.parent.mkdir(parents=True, exist_ok=True)
            conversions.append((output.kind, output.path))
    if conversions:
        on_phase(f"converting {plan.tag} to " + ", ".join(f".{kind} -> {path}" for kind, path in conversions))
        # all targets at once: the engine's layers are read, verified and indexed once for every format
        # the engine's connection and its description of the image from the cache check: not asked for again
        source = DaemonSource(f"docker-daemon:{plan.tag}", plan.tag, inspected=built.inspected,
                              daemon=engine.image_daemon)
        for converted in convert_many(source, conversions, progress=progress, site=site):
            artifacts.append(ArtifactResult(
                converted.target, str(converted.path), converted.source_digest, converted.size, converted.seconds,
                converted.cache_hit, {"compression": str(converted.compression)}))
    return BuildResult(plan, tuple(artifacts), time.monotonic() - started)


def _metered(stack: str, listener: BuildListener, meter: Meter) -> BuildListener:
    """The listener, and the build's meter moved on at each step: ``building demo, step 6/12: RUN …`` with 5
    of 12 steps done (the count is only in the description, so the two never disagree)."""

    def on_event(event: BuildEvent) -> None:
        if event.step is not None and event.steps:
            meter.total(event.steps, completed=event.step - 1)
            action = " ".join(event.line.split(":", 1)[-1].split())
            meter.describe(f"building {stack}, step {event.step}/{event.steps}: {action[:50]}")
        listener(event)

    return on_event


def place_file(source: Path, output: Output, *, seconds: float, cache_hit: bool) -> ArtifactResult:
    """Put a built file from the store at the output path atomically (hard link when possible, else a copy)."""
    export(source, output.path)
    return ArtifactResult(output.kind, str(output.path), None, output.path.stat().st_size, seconds, cache_hit)


@dataclass(frozen=True)
class Prepared:
    plan: BuildPlan
    engine: Engine
    context: Sequence[ContextFile]
    cached: BuiltImage | None


def prepare(
    stack: str,
    *,
    sets: Sequence[str] = (),
    ngc: str | None = None,
    engine_name: str = "auto",
    to: str | None = None,
    output_dir: Path = Path("."),
    tag: str | None = None,
    lock_file: Path | None = None,
    dry_run: bool = False,
    recipes_dirs: Sequence[Path] = (),
    no_cache: bool = False,
    pull: bool = False,
) -> Prepared:
    """Resolve the stack (pinned by ``lock_file`` when given; user folders ``recipes_dirs`` over the
    built-ins), pick the engine, render the context, plan, and ask the engine for a cached result (unless
    ``no_cache`` or ``pull`` ask for the build to run again)."""
    lock = read_lock(lock_file, stack) if lock_file is not None else None
    if lock is not None:
        sets, ngc = sets or lock["sets"], ngc or lock["ngc"]
    resolved = Catalog.from_dirs(recipes_dirs).resolve(stack, sets=list(sets), ngc=ngc)
    base_override = None
    if lock is not None:
        base_override = check_lock(lock, lock_file, resolved)  # type: ignore[arg-type]
    if tag is not None:
        check_tag(tag)
    selection, available = _select(engine_name, to, dry_run)
    engine = selection.engine
    check_rebuild_flags(engine, no_cache=no_cache, pull=pull)
    targets = parse_targets(to, engine.product)
    context = build_context(resolved, fmt=engine.context_format, base_override=base_override)
    plan = plan_build(resolved, context, engine=engine.name, engine_reason=selection.reason, product=engine.product,
                      targets=targets, output_dir=output_dir, tag=tag, base_override=base_override,
                      no_cache=no_cache, pull=pull, sets=sets, ngc=ngc)
    if not available:
        return Prepared(plan, engine, context, None)
    plan, cached = check_cache(plan, engine, context)
    return Prepared(plan, engine, context, cached)


def _select(engine_name: str, to: str | None, dry_run: bool) -> tuple[Any, bool]:
    """The engine selection, and whether it can build here. A dry run only prints the plan, so it needs no
    engine: it plans for the one named (or, for auto, the first that can make the targets) and says it is
    not available."""
    wanted = None if to is None else {t.strip() for t in to.split(",")}
    products = ("image",) if wanted and wanted & {"image", "sqsh"} else ("image", "sif")
    try:
        return select_engine(engine_name, products=products), True
    except ConfigError as err:
        if not dry_run:
            raise
        name = engine_name
        if name == "auto":
            name = next(n for n in AUTO_ORDER if get_engine(n).product in products)
        how = "auto; " if engine_name == "auto" else ""
        return Selection(get_engine(name), f"{name} ({how}not available here: {err.message})"), False


def check_rebuild_flags(engine: Engine, *, no_cache: bool, pull: bool) -> None:
    """``--no-cache``/``--pull`` are the docker engine's: the apptainer engine keeps no layers to skip."""
    flags = [flag for flag, on in (("--no-cache", no_cache), ("--pull", pull)) if on]
    if flags and not engine.keeps_layers:
        raise ConfigError(f"{' '.join(flags)}: options of the docker engine (docker/podman build); the "
                          f"{engine.name} engine keeps no build layers and does not take them",
                          hint="use --engine docker, or leave the option out")


def check_tag(tag: str) -> None:
    ref = parse(tag)
    if ref.digest:
        raise ConfigError(f"--tag {tag}: a build tag cannot carry a digest", hint="write REPO:TAG")
