"""``ckit build STACK``: render, build with an engine, convert to .sif/.sqsh (plan first; --dry-run prints it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..cliapp import SETTINGS, DryRunOpt, JsonOpt, NgcOpt, SetOpt, app, emit_json, info, progress, stderr


@app.command("build")
def build(
    stack: Annotated[str, typer.Argument(metavar="STACK", help="Stack name (see `ckit recipes`).")],
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
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Build STACK with Docker/podman or apptainer, then convert it to .sif and .sqsh."""
    from .. import build as builder
    from ..engine.base import BuildEvent, BuildFailed

    prepared = builder.prepare(stack, sets=sets or [], ngc=ngc, engine_name=engine, to=to, output_dir=output,
                               tag=tag, lock_file=lock_file if locked else None, dry_run=dry_run)
    plan = prepared.plan
    if dry_run:
        if as_json:
            emit_json({"plan": plan.to_dict()})
        else:
            typer.echo(plan.describe(), nl=False)
        return
    info(f"engine: {plan.engine_reason}")
    with progress() as bar:
        task = bar.add_task(f"building {plan.stack}", total=None)
        show_lines = SETTINGS.debug or not bar.live.is_started

        def on_event(event: BuildEvent) -> None:
            if event.step is not None:
                bar.update(task, total=event.steps, completed=event.step - 1,
                           description=f"step {event.step}/{event.steps}: {event.line.split(':', 1)[-1].strip()[:60]}")
            if show_lines:
                info(event.line)

        try:
            result = builder.execute(plan, prepared.engine, prepared.context, on_event, cached=prepared.cached,
                                     on_phase=info, progress=progress)
        except BuildFailed as err:
            if not show_lines:
                stderr.print("--- full build log ---\n" + err.log, markup=False)
            raise
    if as_json:
        emit_json(result.to_dict())
        return
    for artifact in result.artifacts:
        where = artifact.location
        size = f"{artifact.size / 1e6:.1f} MB" if artifact.size is not None else "-"
        hit = "cached" if artifact.cache_hit else f"{artifact.seconds:.1f} s"
        typer.echo(f"{artifact.kind:<6} {where}  {size}  {hit}")
