"""Images from Python: build a stack, convert an image, inspect a ``.sif``/``.sqsh`` (what ``ckit build``,
``ckit convert`` and ``ckit inspect`` do, with the same options and the results their ``--json`` prints)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BuildError
from ..progress import Reporter
from ._common import Folders, Log, folders, quiet, reporter, site_profile
from ._outputs import cap_store, drop_older_builds

if TYPE_CHECKING:
    from ..engine.base import BuildFailed
    from ..image.convert import ConvertResult
    from ..orchestration.build import BuildPlan, BuildResult, Prepared
    from ..site.model import Site


def _prepare(stack: str, *, engine: str, to: str | None, sets: Sequence[str], ngc: str | None,
             output: str | Path, tag: str | None, lock_file: str | Path | None, dry_run: bool,
             recipes: Folders, no_cache: bool = False, pull: bool = False, site: str | Site | None = None
             ) -> Prepared:
    from dataclasses import replace

    from ..orchestration import build as builder

    prepared = builder.prepare(stack, sets=list(sets), ngc=ngc, engine_name=engine, to=to, output_dir=Path(output),
                               tag=tag, lock_file=Path(lock_file) if lock_file is not None else None,
                               dry_run=dry_run, recipes_dirs=folders(recipes), no_cache=no_cache, pull=pull)
    # the options a hint's proposed `ckit build` line repeats (it changes only --set and --locked)
    options = [*(["--engine", engine] if engine != "auto" else []), *(["--to", to] if to else []),
               *(["-o", str(output)] if str(output) != "." else []), *(["--tag", tag] if tag else []),
               *(["--lock-file", str(lock_file)] if lock_file is not None and str(lock_file) != "ckit.lock" else []),
               *(["--no-cache"] if no_cache else []), *(["--pull"] if pull else []),
               *(["--site", site] if isinstance(site, str) else [])]
    plan = prepared.plan
    if plan.source is None or not options:
        return prepared
    return replace(prepared, plan=replace(plan, source=replace(plan.source, options=tuple(options))))


def plan_build(stack: str, *, engine: str = "auto", to: str | None = None, sets: Sequence[str] = (),
               ngc: str | None = None, output: str | Path = ".", tag: str | None = None,
               lock_file: str | Path | None = None, no_cache: bool = False, pull: bool = False,
               recipes: Folders = ()) -> BuildPlan:
    """What :func:`build` would do (``ckit build --dry-run``): needs no engine.

    :param stack: a stack name (``ckit recipes`` lists them).
    :param engine: ``auto``, ``docker`` (Docker or podman) or ``apptainer``.
    :param to: what to produce, e.g. ``"image,sqsh"`` (default: the engine's own product).
    :param sets: recipe parameters, ``ADDON.PARAM=VALUE`` each (``--set``).
    :param ngc: an NGC release such as ``24.06``.
    :param output: the folder for ``.sif``/``.sqsh`` files.
    :param tag: the image tag (default ``localhost/ckit/STACK:FINGERPRINT12``).
    :param lock_file: build FROM the base digest pinned in this lock file (``--locked --lock-file``).
    :param no_cache: run every step again (the engine's ``--no-cache``), even if an image of the same build key
        exists.
    :param pull: pull the base image again (the engine's ``--pull``).
    :param recipes: user recipe folders over the built-ins (``--recipes``).
    """
    return _prepare(stack, engine=engine, to=to, sets=sets, ngc=ngc, output=output, tag=tag, lock_file=lock_file,
                    dry_run=True, recipes=recipes, no_cache=no_cache, pull=pull).plan


def build(stack: str, *, engine: str = "auto", to: str | None = None, sets: Sequence[str] = (),
          ngc: str | None = None, output: str | Path = ".", tag: str | None = None,
          lock_file: str | Path | None = None, no_cache: bool = False, pull: bool = False,
          site: str | Site | None = None, recipes: Folders = (),
          sites: Folders = (), progress: Reporter | None = None, on_log: Log | None = None,
          on_phase: Log = quiet, max_size: int | None = None) -> BuildResult:
    """Build ``stack`` with an engine, then convert it to ``.sif``/``.sqsh`` (``ckit build``).

    Takes :func:`plan_build`'s options, and:

    :param site: convert in a squashfs compression this site's kernel mounts and its Singularity reads.
    :param sites: user site folders over the built-ins (``--sites``).
    :param progress: a :class:`~buildkit.progress.Reporter` for the build steps and conversions (default: none).
    :param on_log: called with each line of the engine's log; when given, a failed build's error names the
        step only (the caller has shown the log), else it carries the log's tail and the whole log is kept in
        a file it names.
    :param on_phase: called with each phase's one-line message (cache hit, building, converting).
    :param max_size: then evict the personal store's least recently used artifacts beyond this many bytes (never
        the ones this build made or was served).
    :returns: the artifacts, as ``ckit build --json`` prints them (:meth:`BuildResult.as_json`).
    :raises BuildError: the engine's build failed.
    """
    from ..engine.base import BuildEvent, BuildFailed
    from ..orchestration import build as builder

    profile = site_profile(site, sites)
    prepared = _prepare(stack, engine=engine, to=to, sets=sets, ngc=ngc, output=output, tag=tag,
                        lock_file=lock_file, dry_run=False, recipes=recipes, no_cache=no_cache, pull=pull, site=site)
    on_phase(f"engine: {prepared.plan.engine_reason}")
    line: Callable[[BuildEvent], None] = (lambda event: on_log(event.line)) if on_log else (lambda event: None)
    try:
        result = builder.execute(prepared.plan, prepared.engine, prepared.context, line, cached=prepared.cached,
                                 on_phase=on_phase, progress=reporter(progress), site=profile)
    except BuildFailed as err:
        raise build_failure(err, prepared.plan.stack, log_shown=on_log is not None) from err
    files = [a for a in result.artifacts if a.kind != "image"]
    dropped = drop_older_builds(prepared.plan.stack, [Path(a.location) for a in files], on_phase)
    for artifact in files:
        if Path(artifact.location) in dropped:
            artifact.extra["replaced"] = dropped[Path(artifact.location)]
    cap_store(max_size, [Path(a.location) for a in result.artifacts if a.kind != "image"])
    return result


def build_failure(err: BuildFailed, stack: str, *, log_shown: bool) -> BuildError:
    """The log once: when its lines were shown as they came, the error only names the step; otherwise the
    error carries the tail and the whole log is kept in a file it names."""
    from ..engine.base import LOG_TAIL_LINES
    from ..fs.files import atomic_write
    from ..storage.store import default_root

    where = f" at {err.step}" if err.step else ""
    advice = f"{err.advice}\n  " if err.advice else ""
    if log_shown:
        return BuildError(f"build failed{where}: {err.cause}", hint=f"{advice}the build log is above")
    lines = err.log.splitlines()
    log_file = default_root() / "logs" / f"build-{stack}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(log_file, (err.log + "\n").encode())
    tail = "\n".join(lines[-LOG_TAIL_LINES:])
    return BuildError(f"build failed{where}: {err.cause}\n--- last {min(len(lines), LOG_TAIL_LINES)} lines of "
                      f"the build log ---\n{tail}", hint=f"{advice}the whole log is in {log_file}")


def convert(source: str, to: str, *, output: str | Path | None = None, compress: str | None = None,
            site: str | Site | None = None, insecure: bool = False, ca_file: str | Path | None = None,
            sites: Folders = (), progress: Reporter | None = None, max_size: int | None = None) -> ConvertResult:
    """Convert an image to ``.sif`` or Enroot ``.sqsh`` without root (``ckit convert``), through the store.

    :param source: the image: ``docker://REF``, ``docker-daemon:REF``, ``docker-archive:FILE``, ``oci:DIR``,
        ``oci-archive:FILE``, or a stack's tag.
    :param to: ``sif`` or ``sqsh`` (:func:`convert_many` takes both).
    :param output: also write the artifact here (atomically; a file there is replaced); a folder (one that
        exists, or a path ending in ``/``, made when missing): the artifact is written into it under the name
        :func:`output_name` gives (``ubuntu_22.04.sif``), which is never replaced unless it is this very
        artifact already; None: the store's copy only.
    :param compress: ``ALGO[:LEVEL]`` (zstd, gzip, xz); default: one the target (and ``site``) reads.
    :param site: pick a compression this site's kernel mounts and its Singularity reads.
    :param insecure: plain http, no TLS verification (a registry source).
    :param ca_file: the CA bundle of the registry.
    :param max_size: then evict the personal store's least recently used artifacts beyond this many bytes
        (:mod:`buildkit.storage.personal`; never this one, nor one in use).
    :returns: the artifact (:meth:`ConvertResult.as_json` is ``ckit convert --json`` without ``source``).
    """
    return convert_many(source, [to], output=output, compress=compress, site=site, insecure=insecure,
                        ca_file=ca_file, sites=sites, progress=progress, max_size=max_size)[0]


def convert_many(source: str, targets: Sequence[str], *, output: str | Path | None = None,
                 compress: str | None = None, site: str | Site | None = None, insecure: bool = False,
                 ca_file: str | Path | None = None, sites: Folders = (), progress: Reporter | None = None,
                 max_size: int | None = None) -> list[ConvertResult]:
    """:func:`convert` to every target (``ckit convert --to sif,sqsh``), the layers read once; ``output`` is a
    folder then (each artifact under its own name)."""
    from dataclasses import replace

    from ..image.convert import convert_many as run_convert
    from ..registry.source import reader
    from ._outputs import named_output, output_folder, place_named

    targets = list(dict.fromkeys(targets))
    folder = output_folder(output, several=len(targets) > 1)
    named = {t: named_output(source, t, folder) for t in targets} if folder is not None else {}
    file = Path(output) if output is not None and folder is None else None
    results = run_convert(source, [(t, file) for t in targets], compress=compress, site=site_profile(site, sites),
                          progress=reporter(progress),
                          registry=reader(insecure=insecure, ca_file=Path(ca_file) if ca_file else None))
    if folder is not None:
        results = [replace(r, path=place_named(r.path, named[r.target])) for r in results]
    cap_store(max_size, [r.path for r in results])
    return results


def inspect(file: str | Path) -> dict[str, Any]:
    """What a ``.sif`` or ``.sqsh`` holds (``ckit inspect --json``): SIF header and objects, labels,
    environment, runscript, or the Enroot/Charliecloud files of a ``.sqsh``.

    :raises ConfigError: ``file`` is neither a SIF nor a squashfs.
    """
    from ..image.inspect import inspect as inspect_file

    return inspect_file(Path(file))
