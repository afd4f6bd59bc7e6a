"""`ckit recipes`, `ckit show`, `ckit render`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigError
from ..fsutil import atomic_write
from ..outside import shown
from .app import SETTINGS, JsonOpt, NgcOpt, SetOpt, StackArg, app, emit_json, info, say, warn


@app.command("recipes")
def recipes_cmd(
    all_layers: Annotated[bool, typer.Option("--all", help="Also list bases and add-ons.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """List the stacks (and with --all the bases and add-ons) with one-line descriptions."""
    from ..recipe import describe
    from ..recipe.catalog import Catalog

    data = describe.catalogue(Catalog.from_dirs(SETTINGS.recipes_dirs), everything=all_layers)
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
    from ..recipe import describe
    from ..recipe.catalog import Catalog

    catalog = Catalog.from_dirs(SETTINGS.recipes_dirs)
    recipe = catalog.resolve(stack, sets=sets or [], ngc=ngc)
    data = describe.resolved(catalog, recipe)
    if json_out:
        emit_json(data)
    else:
        say(describe.show_text(data), nl=False)


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
    from ..recipe.catalog import Catalog
    from ..recipe.model import Copy
    from ..render.context import build_context
    from ..render.context import render as render_recipe
    from ..render.folder import is_folder_target, write_folder

    fmt = fmt.lower()
    if fmt not in ("docker", "singularity"):
        raise typer.BadParameter(f"{fmt!r}: choose docker or singularity", param_hint="--format")
    recipe = Catalog.from_dirs(SETTINGS.recipes_dirs).resolve(stack, sets=sets or [], ngc=ngc)
    for warning in recipe.warnings:
        warn(warning)
    copies = [s.context for s in recipe.steps if isinstance(s, Copy)]
    if output is not None and is_folder_target(output):
        written = write_folder(build_context(recipe, fmt), Path(output))
        info(f"wrote {len(written)} files to {output.rstrip('/')}/ (" + ", ".join(
            str(p.relative_to(Path(output))) for p in written[:4]) + (", …)" if len(written) > 4 else ")"))
        return
    if copies and output is not None:
        raise ConfigError(f"-o {output}: stack {stack} copies files into the image ({', '.join(copies)}), which "
                          f"one file cannot hold", hint=f"write the whole build context: -o {Path(output).stem}/")
    text = render_recipe(recipe, fmt)
    if output is None:
        if copies:
            info(f"note: this file copies {', '.join(copies)} from its build context; "
                 f"`ckit render {stack} -o DIR/` writes them too")
        say(text, nl=False)
    else:
        atomic_write(Path(output), text.encode())
        info(f"wrote {output}")
