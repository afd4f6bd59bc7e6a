"""``ckit cache ls|prune`` (the shared image cache) and ``ckit pyxis-importer get|release`` (Pyxis's importer)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from ..outside import shown
from .app import SETTINGS, DryRunOpt, JsonOpt, app, emit_json, info, say

cache_app = typer.Typer(help="Your store of converted images (default), or a shared image cache (--cache, --site, "
                             "--cluster).", no_args_is_help=True)
importer_app = typer.Typer(help="Pyxis's image importer (plugstack.conf: importer=…/ckit-pyxis-importer).",
                           no_args_is_help=True)
app.add_typer(cache_app, name="cache")
app.add_typer(importer_app, name="pyxis-importer")

FolderOpt = Annotated[Path | None, typer.Option(
    "--cache", metavar="DIR", help="A shared cache folder (default: your own store, CKIT_CACHE_DIR or "
                                   "~/.cache/ckit).")]
ClusterOpt = Annotated[bool, typer.Option("--cluster", help=(
    "The Pyxis importer's cluster cache (/etc/ckit/importer.yaml or CKIT_CLUSTER_CACHE)."))]
SiteOpt = Annotated[str | None, typer.Option("--site", metavar="SITE",
                                             help="Use the site's shared image folder (what `ckit stage` fills).")]


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _source(meta: dict[str, Any]) -> str:
    """Where a cached image came from, as its metadata says: anyone who fills the cache writes it; one line."""
    return shown(meta.get("source") or "?")


@cache_app.command("ls")
def ls(folder: FolderOpt = None, site: SiteOpt = None, cluster: ClusterOpt = False, as_json: JsonOpt = False) -> None:
    """List the cached images: size, last use, the steps that hold them, whose tree holds them, their source."""
    from .. import api

    listing = api.cache_ls(folder=folder, site=site, cluster=cluster, sites=SETTINGS.sites_dirs)
    if as_json:
        emit_json(listing.as_json())
        return
    now = time.time()
    for entry in listing.entries:
        holds = f"held by {len(entry.holds)}" if entry.holds else "-"
        whose = _user(entry.owner) + ("" if entry.trusted else " (not trusted)")
        say(f"{shown(entry.key)[:12]}  {entry.size / 1e6:9.1f} MB  used {_age(now - entry.last_used):>4} ago  "
            f"{holds:<11} {shown(whose):<24} {_source(entry.meta)}")
    for note in listing.notes:
        info(f"note: {note}")
    reuse = listing.reuse
    cap = f" (cap {SETTINGS.store_max_size / 1e9:.2f} GB: ckit config show)" if listing.personal else ""
    info(f"{len(listing.entries)} images, {listing.total_size / 1e9:.2f} GB in {listing.cache}{cap}; your reuse records "
         f"{(reuse.kept_bytes + reuse.freed) / 1e6:.1f} MB ({reuse.freed / 1e6:.1f} MB of them no image needs: "
         "`ckit cache prune` removes those)")


def _user(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


@cache_app.command("prune")
def prune(
    folder: FolderOpt = None,
    site: SiteOpt = None,
    cluster: ClusterOpt = False,
    max_size: Annotated[str | None, typer.Option(
        "--max-size", metavar="SIZE", help="Evict least recently used images beyond this (e.g. 500G; default: "
                                           "your store's cap, CKIT_STORE_MAX_SIZE, 20G; the importer's max_size "
                                           "with --cluster). 0 empties everything no step holds.")] = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Evict least recently used images no running step holds, and remove what dead conversions left."""
    from .. import api

    personal = folder is None and site is None and not cluster
    size = max_size if max_size is not None or not personal else str(SETTINGS.store_max_size)
    pruned = api.cache_prune(max_size=size, folder=folder, site=site, cluster=cluster, dry_run=dry_run,
                             sites=SETTINGS.sites_dirs)
    if as_json:
        emit_json(pruned.as_json())
        return
    verb = "would evict" if dry_run else "evicted"
    for entry in pruned.evicted:
        say(f"{verb} {shown(entry.key)[:12]}  {entry.size / 1e6:.1f} MB  {_source(entry.meta)}")
    reuse = pruned.reuse
    info(f"{verb} {len(pruned.evicted)} images ({sum(e.size for e in pruned.evicted) / 1e9:.2f} GB); removed "
         f"{len(pruned.cleaned)} leftovers; {'would remove' if dry_run else 'removed'} {len(reuse.removed)} reuse "
         f"files no image needs ({reuse.freed / 1e6:.1f} MB); {pruned.total_size / 1e9:.2f} GB remain in "
         f"{pruned.root}")


@importer_app.command("get")
def importer_get(uri: Annotated[str, typer.Argument(metavar="IMAGE_URI", help=(
        "docker://[USER@][REGISTRY#]IMAGE[:TAG][@sha256:DIGEST], as Pyxis passes it."))]) -> None:
    """Print the path of the cached squashfs of IMAGE_URI (converted into the cluster cache on first use)."""
    from ..api._cli import pyxis_importer

    raise typer.Exit(pyxis_importer(["get", uri]))


@importer_app.command("release")
def importer_release() -> None:
    """Drop what `get` holds for this Slurm step (idempotent)."""
    from ..api._cli import pyxis_importer

    raise typer.Exit(pyxis_importer(["release"]))
