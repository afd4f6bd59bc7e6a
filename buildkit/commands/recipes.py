"""`ckit recipes`, `ckit show`, `ckit render`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..outside import shown
from .app import SETTINGS, JsonOpt, NgcOpt, SetOpt, StackArg, app, emit_json, info, say, warn


@app.command("recipes")
def recipes_cmd(
    all_layers: Annotated[bool, typer.Option("--all", help="Also list bases and add-ons.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """List the stacks (and with --all the bases and add-ons) with one-line descriptions."""
    from .. import api

    data = api.recipes(everything=all_layers, recipes=SETTINGS.recipes_dirs)
    if json_out:
        emit_json(data)
        return
    for section, items in data.items():
        say(f"{section}:")
        rows = [(shown(i["name"]), shown(i["description"])) for i in items]  # one line each: anyone's recipe
        width = max((len(name) for name, _ in rows), default=0)
        for name, description in rows:
            say(f"  {name:<{width}}  {description}")


@app.command("show")
def show_cmd(
    stack: StackArg,
    sets: SetOpt = None,
    ngc: NgcOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The resolved stack: layers, parameters, stack facts (CUDA, driver, NCCL…) and warnings."""
    from .. import api
    from ..api._cli import show_text

    data = api.show(stack, sets=sets or [], ngc=ngc, recipes=SETTINGS.recipes_dirs)
    if json_out:
        emit_json(data)
    else:
        say(show_text(data), nl=False)


@app.command("render")
def render_cmd(
    stack: StackArg,
    fmt: Annotated[str, typer.Option("--format", "-f", help="docker (Dockerfile) or singularity (.def).",
                                     case_sensitive=False)] = "docker",
    sets: SetOpt = None,
    ngc: NgcOpt = None,
    output: Annotated[str | None, typer.Option(
        "-o", "--output", metavar="FILE|DIR/",
        help="Write the file here instead of stdout; DIR/ (or an existing folder) gets the complete build "
             "context: the Dockerfile or Singularity.def and the files it copies.")] = None,
) -> None:
    """Render the stack as a Dockerfile or a Singularity/Apptainer .def (stdout unless -o)."""
    from .. import api

    if fmt.lower() not in ("docker", "singularity"):
        raise typer.BadParameter(f"{fmt!r}: choose docker or singularity", param_hint="--format")
    rendered = api.render_recipe(stack, fmt=fmt, sets=sets or [], ngc=ngc, output=output,
                                 recipes=SETTINGS.recipes_dirs)
    for warning in rendered.warnings:
        warn(warning)
    if rendered.written:
        assert output is not None
        info(f"wrote {len(rendered.written)} files to {output.rstrip('/')}/ (" + ", ".join(
            str(p.relative_to(Path(output))) for p in rendered.written[:4]) + (
            ", …)" if len(rendered.written) > 4 else ")"))
    elif output is None:
        if rendered.copies:
            info(f"note: this file copies {', '.join(rendered.copies)} from its build context; "
                 f"`ckit render {stack} -o DIR/` writes them too")
        say(rendered.text, nl=False)
    else:
        info(f"wrote {output}")
