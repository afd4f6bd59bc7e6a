"""`ckit recipes`, `ckit show`, `ckit render`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..cliapp import JsonOpt, NgcOpt, SetOpt, app, emit_json, info, warn
from ..fsutil import atomic_write


@app.command("recipes")
def recipes_cmd(
    all_layers: Annotated[bool, typer.Option("--all", help="Also list bases and add-ons.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """List the stacks (and with --all the bases and add-ons) with one-line descriptions."""
    from ..recipe import describe
    from ..recipe.catalog import Catalog

    data = describe.catalogue(Catalog.from_settings(), everything=all_layers)
    if json_out:
        emit_json(data)
        return
    for section, items in data.items():
        typer.echo(f"{section}:")
        width = max((len(i["name"]) for i in items), default=0)
        for item in items:
            typer.echo(f"  {item['name']:<{width}}  {item['description']}")


@app.command("show")
def show_cmd(
    stack: Annotated[str, typer.Argument(help="Stack name (see `ckit recipes`).")],
    sets: SetOpt = None,
    ngc: NgcOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The resolved stack: layers, parameters, stack facts (CUDA, driver, NCCL…) and warnings."""
    from ..recipe import describe
    from ..recipe.catalog import Catalog

    catalog = Catalog.from_settings()
    recipe = catalog.resolve(stack, sets=sets or [], ngc=ngc)
    data = describe.resolved(catalog, recipe)
    if json_out:
        emit_json(data)
    else:
        typer.echo(describe.show_text(data), nl=False)


@app.command("render")
def render_cmd(
    stack: Annotated[str, typer.Argument(help="Stack name (see `ckit recipes`).")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="docker (Dockerfile) or singularity (.def).",
                                     case_sensitive=False)] = "docker",
    sets: SetOpt = None,
    ngc: NgcOpt = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", metavar="FILE",
                                                help="Write here instead of stdout.")] = None,
) -> None:
    """Render the stack as a Dockerfile or a Singularity/Apptainer .def (stdout unless -o)."""
    from ..recipe.catalog import Catalog
    from ..render.context import render as render_recipe

    fmt = fmt.lower()
    if fmt not in ("docker", "singularity"):
        raise typer.BadParameter(f"{fmt!r}: choose docker or singularity", param_hint="--format")
    recipe = Catalog.from_settings().resolve(stack, sets=sets or [], ngc=ngc)
    for warning in recipe.warnings:
        warn(warning)
    text = render_recipe(recipe, fmt)
    if output is None:
        typer.echo(text, nl=False)
    else:
        atomic_write(output, text.encode())
        info(f"wrote {output}")
