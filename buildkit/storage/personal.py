"""The personal store's size cap: after each conversion, and with ``ckit cache prune``, the least recently used
artifacts go until the store fits.

Every conversion with new inputs (an edited recipe, a new tag) publishes an artifact under a new key, so without a
cap the store only grows; an older key of the same recipe is just another artifact, evicted when it is the least
recently used. A use is the artifact's publication or the last time a conversion or build was served it
(``used/<key>``, stamped by :func:`stamp`). Eviction stays in the store's own tree (the owner's, checked by
:class:`~.store.Store`, every file named by its key) and never removes an artifact that is in use: one whose key's
lease is held (being made or read by another ckit), one a step holds (``holds/<key>/``, the Pyxis importer's
fallback store), one a caller asks to keep (what the command at hand just made or served), or one published or used
in the last ``grace`` seconds (another ckit may be about to copy it out). A copy already placed elsewhere (``-o``,
the current folder) is a file of its own or a hard link, and stays.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Collection

from . import holds, safefs
from .cache import HOLD_MAX_AGE, CacheEntry, Pruned
from .lease import Lease
from .reuse_files import ReuseSweep
from .store import Entry, Store

GRACE = 60.0


def stamp(store: Store, key: str) -> None:
    """Record a use of ``key`` (best effort)."""
    holds.touch(store.root, key)


def _last_used(store: Store, entry: Entry) -> float:
    with contextlib.suppress(OSError):
        return os.stat(store.root / "used" / entry.key).st_mtime
    created = entry.meta.get("created")
    if isinstance(created, (int, float)) and not isinstance(created, bool):
        return float(created)
    with contextlib.suppress(OSError):
        return os.stat(entry.path).st_mtime
    return 0.0


def _holders(store: Store, key: str, max_age: float) -> tuple[str, ...]:
    now = time.time()
    try:
        with os.scandir(store.root / "holds" / key) as listing:
            return tuple(sorted(item.name for item in listing
                                if holds.is_live(item.stat(follow_symlinks=False), now, max_age)))
    except OSError:
        return ()


def entries(store: Store, hold_max_age: float = HOLD_MAX_AGE) -> list[CacheEntry]:
    """The store's artifacts, most recently used first (``ckit cache ls``)."""
    found = []
    for entry in store.entries():
        with contextlib.suppress(OSError):
            found.append(CacheEntry(entry.key, entry.path, safefs.disk_bytes(os.lstat(entry.path)),
                                    min(_last_used(store, entry), time.time()),
                                    _holders(store, entry.key, hold_max_age), entry.meta, store.owner, True))
    return sorted(found, key=lambda e: -e.last_used)


def evict(store: Store, max_bytes: int, *, keep: Collection[str] = (), dry_run: bool = False,
          grace: float = GRACE, hold_max_age: float = HOLD_MAX_AGE) -> list[CacheEntry]:
    """Remove least recently used artifacts that are not in use (module doc) until the store fits ``max_bytes``;
    what was (or, with ``dry_run``, would be) removed. The reuse files only they needed go too."""
    if not store.writable:
        return []
    found = sorted(entries(store, hold_max_age), key=lambda e: e.last_used)
    total, now, removed = sum(e.size for e in found), time.time(), []
    for entry in found:
        if total <= max_bytes:
            break
        if entry.key in keep or entry.holds or now - entry.last_used < grace:
            continue
        if dry_run and (store.locks / f"{entry.key}.lease").exists():  # a real run takes the lease to know
            continue
        if not dry_run and not _remove(store, entry):
            continue
        removed.append(entry)
        total -= entry.size
    return removed  # each removal swept the reuse files only it needed (Store.drop)


def _remove(store: Store, entry: CacheEntry) -> bool:
    """Delete one artifact and its record while holding its key's lease (no ckit is making or reading it)."""
    if not holds.is_key(entry.key) or not store.locks.is_dir():
        return False
    lease = Lease(store.locks / f"{entry.key}.lease")
    try:
        if not lease.try_acquire():
            return False
    except OSError:
        return False
    try:
        if store.get(entry.key, entry.path.suffix[1:]) is None:  # changed or gone meanwhile: not ours to judge
            return False
        store.drop(entry.key, entry.path.suffix[1:])
        with contextlib.suppress(OSError):
            (store.root / "used" / entry.key).unlink()
        return True
    finally:
        lease.release()


def prune(store: Store, max_bytes: int, older_than: float, *, dry_run: bool = False) -> Pruned:
    """``ckit cache prune`` of the personal store: evict down to ``max_bytes``, remove what dead work left
    (older than ``older_than`` seconds), then the reuse files nothing refers to any more."""
    from .cleanup import leftovers

    evicted = evict(store, max_bytes, dry_run=dry_run)
    cleaned = [] if dry_run or not store.root.is_dir() else leftovers(store, older_than, HOLD_MAX_AGE)
    reuse = store.sweep_reuse(gone={e.path.name for e in evicted}, dry_run=dry_run, grace=older_than) \
        if store.root.is_dir() else ReuseSweep()
    return Pruned(store.root, dry_run, evicted, cleaned, reuse, sum(e.size for e in entries(store)))

