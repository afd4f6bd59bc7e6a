"""``ckit build STACK``: render, build with an engine, convert to .sif/.sqsh (plan first; --dry-run prints it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .app import SETTINGS, JsonOpt, NgcOpt, SetOpt, StackArg, app, emit_json, emit_plan, info, progress, say


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
    tag: Annotated[str | None, typer.Option("-t", "--tag", metavar="REF",
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
    from .. import api

    locked_by = lock_file if locked else None
    if dry_run:
        emit_plan(api.plan_build(stack, engine=engine, to=to, sets=sets or [], ngc=ngc, output=output, tag=tag,
                                    lock_file=locked_by, no_cache=no_cache, pull=pull,
                                    recipes=SETTINGS.recipes_dirs), as_json)
        return
    with progress() as reporter:
        # On a terminal the bar stands for the log; elsewhere (CI, a pipe) the log lines are the progress.
        show_lines = SETTINGS.debug or not reporter.drawing
        result = api.build(stack, engine=engine, to=to, sets=sets or [], ngc=ngc, output=output, tag=tag,
                              lock_file=locked_by, no_cache=no_cache, pull=pull, site=site,
                              recipes=SETTINGS.recipes_dirs,
                              sites=SETTINGS.sites_dirs, progress=reporter,
                              on_log=info if show_lines and not SETTINGS.quiet else None, on_phase=info,
                              max_size=SETTINGS.store_max_size)
    if as_json:
        emit_json(result.as_json())
        return
    for artifact in result.artifacts:
        where = artifact.location
        size = f"{artifact.size / 1e6:.1f} MB" if artifact.size is not None else "-"
        hit = "cached" if artifact.cache_hit else f"{artifact.seconds:.1f} s"
        say(f"{artifact.kind:<6} {where}  {size}  {hit}")
