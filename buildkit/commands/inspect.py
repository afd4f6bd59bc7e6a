"""``ckit inspect FILE.sif|FILE.sqsh``: header, descriptors, partition, labels, env and runscript (or /etc/rc)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .app import JsonOpt, app, emit_json, say


@app.command("inspect")
def inspect(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A .sif image or an Enroot .sqsh squashfs.")],
    as_json: JsonOpt = False,
) -> None:
    """Show what a .sif or .sqsh holds: SIF header and objects, labels, environment, runscript or /etc/rc."""
    from .. import api
    from ..api._cli import inspect_text

    report = api.inspect(file)
    if as_json:
        emit_json(report)
        return
    say(inspect_text(report), nl=False)
