"""``ckit sites``, ``ckit sites show SITE`` and ``ckit sites detect``: the site profiles, the provenance of each
fact, and a profile written from what a cluster says."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..outside import shown
from .app import SETTINGS, JsonOpt, app, complete_site, emit_json, info, say

sites_app = typer.Typer(name="sites", help="Site profiles (built-in and --sites folders).",
                        invoke_without_command=True, rich_markup_mode=None)
app.add_typer(sites_app)


@sites_app.callback()
def sites(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the site profiles."""
    if ctx.invoked_subcommand is not None:
        return
    from ..api._cli import list_sites, site_summary

    found = list_sites(SETTINGS.sites_dirs)
    if as_json:
        emit_json([site_summary(s) for s in found])
        return
    width = max(len(s.name) for s in found)
    for site in found:  # a profile in a shared --sites folder is anyone's text: one line per site, escaped
        say(f"{shown(site.name):<{width}}  {shown(site.scheduler):<5}  {shown(site.description)}")


@sites_app.command("show")
def show(name: Annotated[str, typer.Argument(metavar="SITE", help="Site name.", autocompletion=complete_site)],
         as_json: JsonOpt = False) -> None:
    """Every value of a site profile with its verified/seed/uncertain tag."""
    from ..api._cli import load_site, site_data, site_text

    site = load_site(name, SETTINGS.sites_dirs)
    if as_json:
        emit_json(site_data(site))
    else:
        say(site_text(site), nl=False)


@sites_app.command("detect")
def detect(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The new site's name (the profile is NAME.yaml).")
                    ] = "detected",
    output: Annotated[Path | None, typer.Option("-o", "--output", metavar="FILE|DIR", help=(
        "Where the profile goes (default: NAME.yaml here); use it with --sites DIR or CKIT_SITES_PATH."))] = None,
    compare: Annotated[str | None, typer.Option("--compare", metavar="SITE", autocompletion=complete_site, help=(
        "Print how the detected profile differs from this existing one."))] = None,
    partition: Annotated[str | None, typer.Option("-p", "--partition", help=(
        "Partition of the compute-node probe job (default: Slurm's default)."))] = None,
    registry_url: Annotated[str | None, typer.Option("--registry-url", metavar="URL", help=(
        "A registry URL whose answer on a compute node means the nodes reach registries "
        "(default: Docker Hub's /v2/)."))] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a site profile from what the cluster says: Slurm's partitions, GPUs and rules, the runtimes, modules and
    file systems of the login node and of a compute node (a one-task probe job); every value tagged."""
    from .. import api
    from ..api._cli import load_site_file, site_text

    found = api.detect_site(name, output=output or Path(f"{name}.yaml"), compare=compare, partition=partition,
                            registry_url=registry_url, sites=SETTINGS.sites_dirs, on_step=info)
    if as_json:
        emit_json(found.as_json())
        return
    if found.path:
        say(site_text(load_site_file(Path(found.path))), nl=False)
    for note in found.notes:
        info(f"seen: {note}")
    if compare is not None:
        info(f"against {compare}: " + ("no difference" if not found.diff else f"{len(found.diff)} differences"))
        for line in found.diff:
            say(f"  {line}")
    info(f"wrote {found.path}; `ckit doctor --site {name} --sites {Path(found.path or '.').parent}` proves it")
