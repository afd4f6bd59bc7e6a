"""``ckit cache ls|prune`` (the shared image cache) and ``ckit pyxis-importer get|release`` (Pyxis's importer)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..outside import shown
from .app import SETTINGS, DryRunOpt, JsonOpt, app, emit_json, info, say

if TYPE_CHECKING:  # the cache machinery is imported when a command runs (start-up time)
    from ..cache.config import ImporterConfig
    from ..storage.cache import CacheDir

cache_app = typer.Typer(help="The shared image cache: what the Pyxis importer serves and `ckit stage` fills.",
                        no_args_is_help=True)
importer_app = typer.Typer(help="Pyxis's image importer (plugstack.conf: importer=…/ckit-pyxis-importer).",
                           no_args_is_help=True)
app.add_typer(cache_app, name="cache")
app.add_typer(importer_app, name="pyxis-importer")

FolderOpt = Annotated[Path | None, typer.Option(
    "--cache", metavar="DIR", help="The cache folder (default: the importer's, from /etc/ckit/importer.yaml or "
                                   "CKIT_CLUSTER_CACHE).")]
SiteOpt = Annotated[str | None, typer.Option("--site", metavar="SITE",
                                             help="Use the site's shared image folder (what `ckit stage` fills).")]


def _folder(folder: Path | None, site: str | None) -> tuple[CacheDir, ImporterConfig | None]:
    from ..cache import config
    from ..storage.cache import CacheDir

    if folder is not None:
        return CacheDir(folder), None
    if site is not None:
        from ..registry.stage import stage_dir
        from ..site.load import load_site

        profile = load_site(site, SETTINGS.sites_dirs)
        return CacheDir(stage_dir(profile.shared_image_dir, None, site)), None
    cfg = config.load(sites_dirs=tuple(SETTINGS.sites_dirs))
    return CacheDir(cfg.cache, cfg.hold_max_age), cfg


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _source(meta: dict[str, Any]) -> str:
    """Where a cached image came from, as its metadata says: anyone who fills the cache writes it; one line."""
    return shown(meta.get("source") or "?")


@cache_app.command("ls")
def ls(folder: FolderOpt = None, site: SiteOpt = None, as_json: JsonOpt = False) -> None:
    """List the cached images: size, last use, the steps that hold them, whose tree holds them, their source."""
    from ..storage.reuse_files import ReuseSweep

    cache, _cfg = _folder(folder, site)
    entries = sorted(cache.entries(), key=lambda e: -e.last_used)
    own = cache.own_tree_store()
    reuse = own.sweep_reuse(dry_run=True) if own is not None else ReuseSweep()  # what no image needs
    notes = _notes(cache)
    if as_json:
        emit_json({"cache": str(cache.root), "total_size": sum(e.size for e in entries),
                   "entries": [e.as_json() for e in entries], "notes": notes,
                   "reuse": {"files": reuse.kept, "size": reuse.kept_bytes, "orphaned_files": len(reuse.removed),
                             "orphaned_size": reuse.freed}})
        return
    now = time.time()
    for entry in entries:
        holds = f"held by {len(entry.holds)}" if entry.holds else "-"
        whose = _user(entry.owner) + ("" if entry.trusted else " (not trusted)")
        say(f"{shown(entry.key)[:12]}  {entry.size / 1e6:9.1f} MB  used {_age(now - entry.last_used):>4} ago  "
            f"{holds:<11} {shown(whose):<24} {_source(entry.meta)}")
    for note in notes:
        info(f"note: {note}")
    info(f"{len(entries)} images, {sum(e.size for e in entries) / 1e9:.2f} GB in {cache.root}; your reuse records "
         f"{(reuse.kept_bytes + reuse.freed) / 1e6:.1f} MB ({reuse.freed / 1e6:.1f} MB of them no image needs: "
         "`ckit cache prune` removes those)")


def _user(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _notes(cache: CacheDir) -> list[str]:
    """What a reader of this cache should know: an ignored policy, folders of the old shared layout."""
    notes = [cache.folder.policy().note] if cache.folder.policy().note else []
    if cache.legacy():
        notes.append(f"{cache.root} holds folders of the shared layout of earlier ckit versions "
                     f"({', '.join(cache.legacy())}), which nothing serves any more: the folder's owner may remove "
                     "them")
    return notes


@cache_app.command("prune")
def prune(
    folder: FolderOpt = None,
    site: SiteOpt = None,
    max_size: Annotated[str | None, typer.Option(
        "--max-size", metavar="SIZE", help="Evict least recently used images beyond this (e.g. 500G; default: "
                                           "the importer's max_size). 0 empties everything no step holds.")] = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Evict least recently used images no running step holds, and remove what dead conversions left."""
    from ..cache.config import parse_size
    from ..errors import ConfigError
    from ..storage.lease import stale_seconds

    cache, cfg = _folder(folder, site)
    limit = parse_size(max_size, "--max-size") if max_size is not None else (cfg.max_size if cfg else None)
    if limit is None:
        raise ConfigError("no size to prune to", hint="pass --max-size SIZE (or set max_size in importer.yaml)")
    pruned = cache.prune(limit, stale_seconds(), dry_run=dry_run)
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
         f"{cache.root}")


@importer_app.command("get")
def importer_get(uri: Annotated[str, typer.Argument(metavar="IMAGE_URI", help=(
        "docker://[USER@][REGISTRY#]IMAGE[:TAG][@sha256:DIGEST], as Pyxis passes it."))]) -> None:
    """Print the path of the cached squashfs of IMAGE_URI (converted into the cluster cache on first use)."""
    from ..cache.importer import main

    raise typer.Exit(main(["get", uri]))


@importer_app.command("release")
def importer_release() -> None:
    """Drop what `get` holds for this Slurm step (idempotent)."""
    from ..cache.importer import main

    raise typer.Exit(main(["release"]))
