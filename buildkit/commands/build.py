"""``ckit build STACK``: render, build with an engine, convert to .sif/.sqsh (plan first; --dry-run prints it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import BuildError
from .app import SETTINGS, JsonOpt, NgcOpt, SetOpt, StackArg, app, emit_json, emit_plan, info, progress, say

if TYPE_CHECKING:
    from ..engine.base import BuildFailed
    from ..site.model import Site


@app.command("build")
def build(
    stack: StackArg,
    engine: Annotated[str, typer.Option("--engine", metavar="auto|docker|apptainer",
                                        help="Build engine; auto picks what is available.")] = "auto",
    to: Annotated[str | None, typer.Option("--to", metavar="image,sif,sqsh",
                                           help="What to produce (default: the engine's own product).")] = None,
    sets: SetOpt = None,
    ngc: NgcOpt = None,
    output: Annotated[Path, typer.Option("-o", "--output", metavar="DIR",
                                         help="Folder for .sif/.sqsh artifacts.")] = Path("."),
    tag: Annotated[str | None, typer.Option("--tag", metavar="REF",
                                            help="Image tag (default localhost/ckit/STACK:FINGERPRINT12).")] = None,
    locked: Annotated[bool, typer.Option("--locked", help="Build FROM the base digest pinned in the lock file.")] = False,
    lock_file: Annotated[Path, typer.Option("--lock-file", metavar="FILE",
                                            help="Lock file written by `ckit lock`.")] = Path("ckit.lock"),
    site: Annotated[str | None, typer.Option("--site", metavar="SITE",
                                             help="Convert in a squashfs compression the site's kernel mounts and its "
                                                  "Singularity/Apptainer version reads.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; build nothing (no engine needed).")
                       ] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Run every step again (the engine's --no-cache), "
                                           "even if an image of the same build key exists.")] = False,
    pull: Annotated[bool, typer.Option("--pull", help="Pull the base image again (the engine's --pull), even if "
                                       "an image of the same build key exists.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build STACK with Docker/podman or apptainer, then convert it to .sif and .sqsh."""
    from ..engine.base import BuildEvent, BuildFailed
    from ..orchestration import build as builder

    site_profile = _site(site)
    prepared = builder.prepare(stack, sets=sets or [], ngc=ngc, engine_name=engine, to=to, output_dir=output,
                               tag=tag, lock_file=lock_file if locked else None, dry_run=dry_run,
                               recipes_dirs=SETTINGS.recipes_dirs, no_cache=no_cache, pull=pull)
    plan = prepared.plan
    if dry_run:
        emit_plan(plan, as_json)
        return
    info(f"engine: {plan.engine_reason}")
    with progress() as reporter:
        # On a terminal the bar stands for the log; elsewhere (CI, a pipe) the log lines are the progress.
        show_lines = SETTINGS.debug or not reporter.drawing

        def on_event(event: BuildEvent) -> None:
            if show_lines:
                info(event.line)

        try:
            result = builder.execute(plan, prepared.engine, prepared.context, on_event, cached=prepared.cached,
                                     on_phase=info, progress=reporter, site=site_profile)
        except BuildFailed as err:
            raise _failure(err, plan.stack, log_shown=show_lines and not SETTINGS.quiet) from err
    if as_json:
        emit_json(result.as_json())
        return
    for artifact in result.artifacts:
        where = artifact.location
        size = f"{artifact.size / 1e6:.1f} MB" if artifact.size is not None else "-"
        hit = "cached" if artifact.cache_hit else f"{artifact.seconds:.1f} s"
        say(f"{artifact.kind:<6} {where}  {size}  {hit}")


def _failure(err: BuildFailed, stack: str, *, log_shown: bool) -> BuildError:
    """The log once: when its lines were printed as they came, the error only names the step; when a bar
    stood for them, the error carries the tail and the whole log is kept in a file it names."""
    from ..engine.base import LOG_TAIL_LINES
    from ..fsutil import atomic_write
    from ..storage.store import default_root

    where = f" at {err.step}" if err.step else ""
    if log_shown:
        return BuildError(f"build failed{where}: {err.cause}", hint="the build log is above")
    lines = err.log.splitlines()
    log_file = default_root() / "logs" / f"build-{stack}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(log_file, (err.log + "\n").encode())
    tail = "\n".join(lines[-LOG_TAIL_LINES:])
    return BuildError(f"build failed{where}: {err.cause}\n--- last {min(len(lines), LOG_TAIL_LINES)} lines of "
                      f"the build log ---\n{tail}", hint=f"the whole log is in {log_file}")


def _site(name: str | None) -> Site | None:
    """The site profile whose runtime must mount the .sif/.sqsh (``--site``), or None."""
    if name is None:
        return None
    from ..site import load_site

    return load_site(name, SETTINGS.sites_dirs)
