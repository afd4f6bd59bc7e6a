"""``ckit sites`` and ``ckit sites show SITE``: the site profiles and the provenance of each fact."""

from __future__ import annotations

from typing import Annotated

import typer

from ..outside import shown
from .app import SETTINGS, JsonOpt, app, complete_site, emit_json, say

sites_app = typer.Typer(name="sites", help="Site profiles (built-in and --sites folders).",
                        invoke_without_command=True, rich_markup_mode=None)
app.add_typer(sites_app)


@sites_app.callback()
def sites(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the site profiles."""
    if ctx.invoked_subcommand is not None:
        return
    from ..site import list_sites
    from ..site.describe import site_summary

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
    from ..site import load_site
    from ..site.describe import site_data, site_text

    site = load_site(name, SETTINGS.sites_dirs)
    if as_json:
        emit_json(site_data(site))
    else:
        say(site_text(site), nl=False)
