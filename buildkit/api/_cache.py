"""The shared image cache from Python (``ckit cache ls``, ``ckit cache prune``): what the Pyxis importer serves
and ``ckit stage`` fills."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ._common import Folders, folders, site_profile

if TYPE_CHECKING:
    from ..importer.config import ImporterConfig
    from ..site.model import Site
    from ..storage.cache import CacheDir, CacheEntry, Pruned
    from ..storage.reuse_files import ReuseSweep


def cache_folder(folder: str | Path | None = None, site: str | Site | None = None, *,
                 sites: Folders = ()) -> tuple[CacheDir, ImporterConfig | None]:
    """The cache: ``folder``, else the site's shared image folder, else the importer's (``/etc/ckit/importer.yaml``
    or ``CKIT_CLUSTER_CACHE``) with its configuration."""
    from ..importer import config
    from ..storage.cache import CacheDir

    if folder is not None:
        return CacheDir(Path(folder)), None
    profile = site_profile(site, sites)
    if profile is not None:
        from ..orchestration.stage import stage_dir

        return CacheDir(stage_dir(profile.shared_image_dir, None, profile.name)), None
    cfg = config.load(sites_dirs=tuple(folders(sites)))
    return CacheDir(cfg.cache, cfg.hold_max_age), cfg


@dataclass(frozen=True)
class CacheListing:
    """What ``ckit cache ls --json`` prints: the images newest-used first, notes, and your reuse records."""

    cache: Path
    entries: list[CacheEntry]
    notes: list[str]
    reuse: ReuseSweep = field(repr=False)
    personal: bool = False  # the user's own store (not a shared cache folder)

    @property
    def total_size(self) -> int:
        return sum(e.size for e in self.entries)

    def as_json(self) -> dict[str, Any]:
        reuse = self.reuse
        return {"cache": str(self.cache), "total_size": self.total_size, "entries": [e.as_json() for e in self.entries],
                "notes": self.notes, "reuse": {"files": reuse.kept, "size": reuse.kept_bytes,
                                               "orphaned_files": len(reuse.removed), "orphaned_size": reuse.freed}}


def _notes(cache: CacheDir) -> list[str]:
    """What a reader of this cache should know: an ignored policy, trees someone made under another user's name
    (nobody serves from them; root should remove them), folders of the old shared layout."""
    notes = [cache.folder.policy().note] if cache.folder.policy().note else []
    mine = f"u{os.geteuid()}"
    for why in cache.folder.squatted():
        yours = Path(why.split(": ", 1)[0]).name == mine
        notes.append(f"{why}: not a tree of its user's, nobody serves from it"
                     + ("; you convert into your personal store instead" if yours else "")
                     + " (root may remove it)")
    if cache.legacy():
        notes.append(f"{cache.root} holds folders of the shared layout of earlier ckit versions "
                     f"({', '.join(cache.legacy())}), which nothing serves any more: the folder's owner may remove "
                     "them")
    return notes


def _personal(folder: str | Path | None, site: str | Site | None, cluster: bool) -> bool:
    if cluster and (folder is not None or site is not None):
        raise ConfigError("--cluster names the importer's cache; --cache and --site name another",
                          hint="give one of them")
    return folder is None and site is None and not cluster


def cache_ls(*, folder: str | Path | None = None, site: str | Site | None = None, cluster: bool = False,
             sites: Folders = ()) -> CacheListing:
    """The cached images: size, last use, the steps that hold them, whose tree holds them, their source. Without
    ``folder``, ``site`` or ``cluster`` (the Pyxis importer's cache): the personal store (``CKIT_CACHE_DIR``)."""
    from ..storage.reuse_files import ReuseSweep

    if _personal(folder, site, cluster):
        from ..storage import personal
        from ..storage.store import Store

        store = Store()
        return CacheListing(store.root, personal.entries(store), [], store.sweep_reuse(dry_run=True), True)
    cache, _ = cache_folder(folder, site, sites=sites)
    own = cache.own_tree_store()
    reuse = own.sweep_reuse(dry_run=True) if own is not None else ReuseSweep()  # what no image needs
    return CacheListing(cache.root, sorted(cache.entries(), key=lambda e: -e.last_used), _notes(cache), reuse)


def cache_prune(*, max_size: str | int | None = None, folder: str | Path | None = None,
                site: str | Site | None = None, cluster: bool = False, dry_run: bool = False,
                sites: Folders = ()) -> Pruned:
    """Evict least recently used images no running step holds beyond ``max_size`` (``500G`` or bytes; for the
    importer's cache, default: its ``max_size``), and remove what dead conversions left (``ckit cache prune``).
    Without ``folder``, ``site`` or ``cluster``: the personal store, whose cap the caller gives."""
    from ..config.limits import parse_size
    from ..storage.lease import stale_seconds

    if _personal(folder, site, cluster):
        from ..storage import personal
        from ..storage.store import Store

        if max_size is None:
            raise ConfigError("no size to prune your store to", hint="pass --max-size SIZE (e.g. 20G)")
        return personal.prune(Store(), parse_size(max_size, "--max-size"), stale_seconds(), dry_run=dry_run)
    cache, cfg = cache_folder(folder, site, sites=sites)
    limit = parse_size(max_size, "--max-size") if max_size is not None else (cfg.max_size if cfg else None)
    if limit is None:
        raise ConfigError("no size to prune to", hint="pass --max-size SIZE (or set max_size in importer.yaml)")
    return cache.prune(limit, stale_seconds(), dry_run=dry_run)
