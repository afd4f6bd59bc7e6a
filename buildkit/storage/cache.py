"""The cache folder: converted images shared by every user, node and job of a cluster.

One layout for the Pyxis importer's cluster cache and for a site's staging folder (``ckit stage``), so a staged
image is also what the importer serves and what ``ckit launch`` finds. Who writes where, and whose files a reader
serves, is :mod:`.trust`'s: every user writes only their own tree ``u<UID>/``, a store (:mod:`.store`) plus::

    refs/images/<registry>+<repo>@sha256-<hex>.<target>.<compression>.json   manifest digest -> key
    refs/tags/<registry>+<repo>:<tag>.json                                   tag -> the digest it last named
    refs/stacks/<stack>.<target>.<compression>.json                          a staged ckit stack -> key
    holds/<key>/<job>.<step>@<host>  a step of this user uses <key> (in whichever tree it is): eviction skips it
    used/<key>                      its modification time is this user's last use of <key>
    access/<registry>+<repo>        the registry let anyone pull the repository without credentials (``public``)
    private/                        0700: ``refs/`` and ``access/`` of images pulled with credentials (whose names
                                    are nobody else's business), read by this user only

A record under ``refs/`` only points, within its own tree: it names a key, and a reader checks that it names the
digest, format and compression it was looked up for; an entry whose artifact is gone or fails its check is a miss.
A reader takes its hold and stamps its use *before* it looks the file up. Eviction renames an artifact aside, then
checks again that no step of any user holds it and that no use stamp moved (a stamp is read by opening the file,
which on NFS fetches fresh attributes even where a folder listing may lag), and only then deletes it; otherwise it
links the file back. So a path the importer printed stays valid while its step holds it, and eviction never races a
reader into a missing file. Users evict from their own tree, root from every tree, and each counts only what it
may evict, on the blocks the files take (a sparse file claims nothing): no user's files make another user evict.
A hold protects an artifact for ``hold_max_age`` whoever took it, but only as a regular file dated no later than
now (:func:`.holds.is_live`): nobody pins an image for ever.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from . import holds, safefs
from .holds import is_key
from .reuse_files import ReuseSweep
from .store import Entry, Store
from .trust import CacheRoot, tree_name

PRIVATE = "private"  # a tree's folder of records about images pulled with credentials (0700)
HOLD_MAX_AGE = 24 * 3600.0  # a hold older than this is from a step that died without release
LEGACY = ("artifacts", "refs", "holds", "used", "access", "locks", "work", "reuse")  # the shared layout before trees


def safe_name(text: str) -> str:
    """A file name for a reference: ``/`` becomes ``+`` (never in a repository name); long ones are hashed."""
    name = text.replace("/", "+")
    if len(name) > 200 or name.startswith(".") or "\0" in name:
        return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
    return name


def image_ref_name(registry: str, repository: str, digest: str, target: str, compression: str) -> str:
    return safe_name(f"{registry}/{repository}@{digest.replace(':', '-')}.{target}.{compression}")


@dataclass(frozen=True)
class CacheEntry:
    """One artifact in the cache, for ``ckit cache ls`` and eviction."""

    key: str
    path: Path
    size: int
    last_used: float
    holds: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    owner: int = -1  # the uid whose tree holds it
    trusted: bool = True  # this user's readers serve it

    def as_json(self) -> dict[str, Any]:
        return {"key": self.key, "path": str(self.path), "size": self.size, "last_used": round(self.last_used),
                "holds": list(self.holds), "owner": self.owner, "trusted": self.trusted,
                "source": self.meta.get("source"), "manifest_digest": self.meta.get("manifest_digest"),
                "source_digest": self.meta.get("source_digest"), "target": self.meta.get("target"),
                "compression": self.meta.get("compression")}


@dataclass(frozen=True)
class Pruned:
    """What a prune removed (or, in a dry run, would remove)."""

    root: Path
    dry_run: bool
    evicted: list[CacheEntry]
    cleaned: list[str]
    reuse: ReuseSweep
    total_size: int

    def as_json(self) -> dict[str, Any]:
        return {"cache": str(self.root), "dry_run": self.dry_run, "evicted": [e.as_json() for e in self.evicted],
                "cleaned": self.cleaned, "reuse": self.reuse.as_json(), "total_size": self.total_size}


class CacheDir:
    """A cache folder (see the module doc). ``fallback``: the store this user converts into when it cannot write
    the folder (its personal store), or None (then such a user only reads)."""

    def __init__(self, root: Path, hold_max_age: float = HOLD_MAX_AGE, *, fallback: Path | None = None) -> None:
        self.root = Path(root)
        self.folder = CacheRoot(self.root)
        self.hold_max_age = hold_max_age
        self.fallback = fallback
        self.holder = ""  # named in the leases this process takes
        self.on_wait: Callable[[str], None] | None = None
        self._writer: Store | None = None

    def tree_store(self, uid: int) -> Store:
        return Store(self.root / tree_name(uid), owner=uid, base=self.root, parts=(tree_name(uid),))

    def writer(self) -> Store:
        """This user's store: its tree here, else ``fallback``; ConfigError when it has neither."""
        if self._writer is None:
            tree = self.folder.own_tree()
            if tree is not None:
                store = self.tree_store(os.geteuid())
            elif self.fallback is not None:
                store = Store(self.fallback)
            elif self.folder.taken:
                tree = self.root / tree_name(os.geteuid())
                raise ConfigError(f"{self.folder.taken}: ckit neither writes there nor serves from it",
                                  hint=f"ask root to remove {tree}: another user made it under your name "
                                       "(you did not make it as it is)")
            else:
                raise ConfigError(f"cache folder {self.root} is not writable for you",
                                  hint="ask its owner to stage the image, or use a folder you may write (--dest)")
            store.holder, store.on_wait = self.holder, self.on_wait
            self._writer = store
        return self._writer

    def own_tree_store(self) -> Store | None:
        """This user's tree here when it has one (never made by asking)."""
        own = self.root / tree_name(os.geteuid())
        return self.tree_store(os.geteuid()) if safefs.dir_flaw(own, os.geteuid()) is None else None

    def readers(self) -> list[Store]:
        """The stores this user serves from: the trusted trees (its own first), then its fallback store."""
        stores = [self.tree_store(uid) for uid, _ in self.folder.trusted_trees()]
        if self.fallback is not None and (self._writer is None or self._writer.root == self.fallback):
            stores.append(Store(self.fallback))
        return stores

    def own_root(self) -> Path | None:
        """This user's writable tree (or fallback store), or None when it has none: holds and stamps are then
        skipped (a reader of a folder it cannot write cannot protect what it reads from its owner's eviction)."""
        try:
            return self.writer().root
        except ConfigError:
            return None

    # -- refs ----------------------------------------------------------------------------------------

    def _ref_folders(self, store: Store, *parts: str) -> list[Path]:
        """Where ``store``'s records under ``parts`` lie: the public folder, and for this user's own store its
        private one (``private/``, 0700: the names of private repositories are nobody else's business)."""
        folders = [store.root.joinpath(*parts)]
        return [*folders, store.root.joinpath(PRIVATE, *parts)] if store.owner == os.geteuid() else folders

    def read_ref(self, store: Store, kind: str, name: str) -> dict[str, Any] | None:
        """A record of ``store``'s (sound as its owner's, bounded), or None."""
        for folder in self._ref_folders(store, "refs", kind):
            raw = safefs.read_small(folder / f"{name}.json", store.owner)
            try:
                data = json.loads(raw) if raw is not None else None
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
        return None

    def find_refs(self, kind: str, name: str) -> list[tuple[Store, dict[str, Any]]]:
        """The record ``kind/name`` in every store this user serves from, newest first."""
        found = [(s, r) for s in self.readers() if (r := self.read_ref(s, kind, name)) is not None]
        return sorted(found, key=lambda item: -_number(item[1].get("time")))

    def write_ref(self, kind: str, name: str, data: dict[str, Any], *, private: bool = False) -> None:
        """A record in this user's store: a ``private`` one (an image pulled with credentials) in its private
        folder, 0600, its name included."""
        store = self.writer()
        top = store.root / PRIVATE if private else store.root
        folder = top / "refs" / kind
        if private:
            safefs.ensure_dir(top, 0o700)
        for path in (folder.parent, folder):
            safefs.ensure_dir(path, 0o700 if private else 0o755)
        text = json.dumps({**data, "time": int(time.time())}, indent=2, sort_keys=True) + "\n"
        safefs.write_file(folder, f"{name}.json", text.encode(), 0o600 if private else 0o644)

    def ref_files(self, store: Store, kind: str, pattern: str) -> list[dict[str, Any]]:
        """Every sound record of ``store`` under ``refs/kind`` whose file name matches ``pattern``."""
        names = {path.name for folder in self._ref_folders(store, "refs", kind) for path in folder.glob(pattern)}
        found = []
        for name in sorted(names):
            data = self.read_ref(store, kind, name.removesuffix(".json"))
            if data is not None:
                found.append(data)
        return found

    # -- holds, use, access --------------------------------------------------------------------------

    def hold(self, key: str, holder: str) -> None:
        tree = self.own_root()
        if tree is not None:
            with contextlib.suppress(OSError, safefs.Unsafe):
                holds.hold(tree, key, holder)

    def touch(self, key: str) -> None:
        """Record a use of ``key`` (in this user's tree; every user's use counts for eviction)."""
        tree = self.own_root()
        if tree is not None:
            holds.touch(tree, key)

    def release(self, holder: str) -> int:
        """Drop every hold of ``holder``; how many there were (0 the second time: release is idempotent)."""
        tree = self.folder.path / tree_name(os.geteuid())
        dropped = 0
        for root in (tree, self.fallback):
            if root is not None and safefs.dir_flaw(root, os.geteuid()) is None:
                for path in (root / "holds").glob(f"*/{holder}"):
                    dropped += safefs.unlink_in(path.parent, (), path.name)
        return dropped

    def _each_tree(self, *parts: str) -> list[tuple[int, int]]:
        """(uid, folder descriptor) of ``u<UID>/parts…`` in every tree that has it (reached without following a
        link; the caller closes them)."""
        found = []
        for uid, tree in self.folder.trees():
            with contextlib.suppress(OSError):
                found.append((uid, safefs.open_dir(self.root, tree.name, *parts)))
        return found

    def holders(self, key: str) -> tuple[str, ...]:
        """The live holds of ``key`` in every user's tree (listing a folder re-reads it, also on NFS)."""
        now, live = time.time(), []
        for uid, fd in self._each_tree("holds", key) if is_key(key) else []:
            try:
                with os.scandir(fd) as listing:
                    for item in listing:
                        with contextlib.suppress(OSError):
                            st = item.stat(follow_symlinks=False)
                            if holds.is_live(st, now, self.hold_max_age):
                                live.append(item.name if uid == os.geteuid() else f"{item.name} (uid {uid})")
            finally:
                os.close(fd)
        return tuple(sorted(live))

    def use_stamps(self, key: str) -> tuple[tuple[int, int], ...]:
        """Every user's use stamp of ``key`` (uid, mtime in ns), read through an open file: fresh from NFS too."""
        stamps = []
        for uid, fd in self._each_tree("used") if is_key(key) else []:
            try:
                one = safefs.open_checked(key, None, dir_fd=fd)
                if one is not None:
                    stamps.append((uid, os.fstat(one).st_mtime_ns))
                    os.close(one)
            finally:
                os.close(fd)
        return tuple(stamps)

    def last_used(self, entry: Entry) -> float:
        """The latest use of ``entry`` by any user, never later than now (a date set in the future is no use)."""
        stamps = self.use_stamps(entry.key)
        when = max(ns for _, ns in stamps) / 1e9 if stamps else _number(entry.meta.get("created"))
        return min(when, time.time())

    def grant(self, registry: str, repository: str, who: str) -> None:
        """Remember that the registry let this user (``who``: its uid, or ``public``) pull from the repository."""
        tree = self.own_root()
        if tree is None:
            return
        public = who == "public"
        folder = tree / "access" if public else tree / PRIVATE / "access"  # a private repository's name is private
        with contextlib.suppress(OSError, safefs.Unsafe):
            if not public:
                safefs.ensure_dir(folder.parent, 0o700)
            safefs.ensure_dir(folder, 0o755 if public else 0o700)
            name = safe_name(f"{registry}/{repository}")
            if safefs.read_small(folder / name, os.geteuid(), 64) != who.encode():
                safefs.write_file(folder, name, who.encode(), 0o644 if public else 0o600)

    def granted(self, registry: str, repository: str) -> bool:
        """The registry let this user pull the repository before, or a trusted writer found it public."""
        name = safe_name(f"{registry}/{repository}")
        for store in self.readers():
            for folder in self._ref_folders(store, "access"):
                seen = safefs.read_small(folder / name, store.owner, 64)
                if seen is not None and (store.owner == os.geteuid() or seen == b"public"):
                    return True
        return False

    # -- listing and eviction ------------------------------------------------------------------------

    def entries(self) -> list[CacheEntry]:
        """Every user's artifacts this user can read, each with its owner and whether this user trusts it."""
        trusted = {uid for uid, _ in self.folder.trusted_trees()}
        out = []
        for uid, _ in self.folder.trees():
            for entry in self.tree_store(uid).entries():
                with contextlib.suppress(OSError):
                    size = safefs.disk_bytes(os.lstat(entry.path))
                    out.append(CacheEntry(entry.key, entry.path, size, self.last_used(entry),
                                          self.holders(entry.key), entry.meta, uid, uid in trusted))
        return out

    def total_size(self) -> int:
        return sum(e.size for e in self.entries())

    def evict(self, max_bytes: int, *, dry_run: bool = False, sweep: bool = True) -> list[CacheEntry]:
        """Remove least recently used artifacts no step holds until what this user may remove fits ``max_bytes``
        (its own tree, or every tree for root: what others keep is theirs to count, so no user's claims make
        another evict), then (unless ``sweep`` is off: the caller sweeps) the reuse files only they needed."""
        entries = sorted((e for e in self.entries() if _may_remove(e)), key=lambda e: e.last_used)
        total = sum(e.size for e in entries)
        removed = []
        for entry in entries:
            if total <= max_bytes:
                break
            if not _may_remove(entry) or entry.holds or (not dry_run and not self.remove(entry)):
                continue
            removed.append(entry)
            total -= entry.size
        if removed and sweep and not dry_run and self.own_root() is not None:
            self.writer().sweep_reuse()
        return removed

    def prune(self, max_bytes: int, older_than: float, *, dry_run: bool = False) -> Pruned:
        """``ckit cache prune``: evict down to ``max_bytes``, remove what this user's dead work left (older than
        ``older_than`` seconds), then the reuse files nothing refers to any more."""
        evicted = self.evict(max_bytes, dry_run=dry_run, sweep=False)
        mine = self.own_tree_store()
        cleaned = [] if dry_run or mine is None else self.cleanup(mine, older_than)
        reuse = mine.sweep_reuse(gone={e.path.name for e in evicted}, dry_run=dry_run, grace=older_than) \
            if mine is not None else ReuseSweep()
        return Pruned(self.root, dry_run, evicted, cleaned, reuse, self.total_size())

    def remove(self, entry: CacheEntry) -> bool:
        """Delete one artifact unless a step holds it (see the module doc for the order of checks). Only what
        the key names is removed, reached without following a link."""
        if not _may_remove(entry) or not is_key(entry.key):
            return False
        stamp = self.use_stamps(entry.key)
        if self.holders(entry.key):
            return False
        name, aside = entry.path.name, f".evict.{entry.key}.{os.urandom(8).hex()}"
        try:
            dfd = safefs.open_dir(self.root, tree_name(entry.owner), "artifacts")
        except OSError:
            return False
        try:
            try:
                os.rename(name, aside, src_dir_fd=dfd, dst_dir_fd=dfd)
            except OSError:  # already gone
                return False
            try:
                if self.holders(entry.key) or self.use_stamps(entry.key) != stamp:
                    with contextlib.suppress(FileExistsError):
                        os.link(aside, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                    return False
                with contextlib.suppress(OSError):
                    os.unlink(f"{entry.key}.json", dir_fd=dfd)
                return True
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(aside, dir_fd=dfd)
        finally:
            os.close(dfd)

    def cleanup(self, store: Store, older_than: float) -> list[str]:
        """Remove what this user's dead work left behind (see :func:`.cleanup.leftovers`)."""
        from .cleanup import leftovers

        return leftovers(store, older_than, self.hold_max_age)

    def legacy(self) -> list[str]:
        """Folders of the shared layout of earlier ckit versions, which nothing serves any more."""
        return [name for name in LEGACY if os.path.isdir(self.root / name)]


def _may_remove(entry: CacheEntry) -> bool:
    return entry.owner == os.geteuid() or os.geteuid() == 0


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
