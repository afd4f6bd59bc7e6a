"""The cache folder: converted images shared by every user, node and job of a cluster.

One layout for the Pyxis importer's cluster cache and for a site's staging folder (``ckit stage``), so a staged
image is also what the importer serves and what ``ckit launch`` finds::

    artifacts/<key>.<sqsh|sif>      the image (0644, appears atomically, verified; the artifact store's layout)
    artifacts/<key>.json            what it was made from (source, digests, compression, size, identity)
    locks/<key>.lease               held while <key> is being made (NFS-safe lease, see buildkit.lease)
    refs/images/<registry>+<repo>@sha256-<hex>.<target>.<compression>.json   manifest digest -> key
    refs/tags/<registry>+<repo>:<tag>.json                                   tag -> the digest it last named
    refs/stacks/<stack>.<target>.<compression>.json                          a staged ckit stack -> key
    holds/<key>/<job>.<step>@<host>  a running step uses <key>: eviction skips it
    used/<key>                      its modification time is the last use (for least-recently-used eviction)
    access/<registry>+<repo>/<uid>  the registry accepted this user's credentials for the repository
    access/<registry>+<repo>/public the repository answered without credentials

A record under ``refs/`` only points: an entry whose artifact is gone or fails its check is a miss. A reader takes
its hold and stamps ``used/<key>`` *before* it looks the file up. Eviction renames an artifact aside, then checks
again that no step holds it and that its use stamp did not move (the stamp is read by opening the file, which on
NFS fetches fresh attributes even where a folder listing may lag), and only then deletes it; otherwise it links the
file back. So a path the importer printed stays valid while its step holds it, and eviction never races a reader
into a missing file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fsbase import make_dir
from ..reuse_files import ReuseSweep
from ..store import Entry, Store
from . import holds
from .holds import is_key

HOLD_MAX_AGE = 24 * 3600.0  # a hold older than this is from a step that died without release



def safe_name(text: str) -> str:
    """A file name for a reference: ``/`` becomes ``+`` (never in a repository name); long ones are hashed."""
    name = text.replace("/", "+")
    if len(name) > 200 or name.startswith("."):
        return hashlib.sha256(text.encode()).hexdigest()
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

    def as_json(self) -> dict[str, Any]:
        return {"key": self.key, "path": str(self.path), "size": self.size, "last_used": round(self.last_used),
                "holds": list(self.holds), "source": self.meta.get("source"),
                "manifest_digest": self.meta.get("manifest_digest"), "source_digest": self.meta.get("source_digest"),
                "target": self.meta.get("target"), "compression": self.meta.get("compression")}


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
    """A cache folder (see the module doc). Every write is atomic; every read tolerates a concurrent writer."""

    def __init__(self, root: Path, hold_max_age: float = HOLD_MAX_AGE) -> None:
        self.root = Path(root)
        self.store = Store(self.root)
        self.hold_max_age = hold_max_age

    def _dir(self, *parts: str) -> Path:
        folder = self.root.joinpath(*parts)
        make_dir(folder, self.root)
        return folder

    # -- refs ----------------------------------------------------------------------------------------

    def read_ref(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.root / "refs" / kind / f"{name}.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_ref(self, kind: str, name: str, data: dict[str, Any]) -> None:
        folder = self._dir("refs", kind)
        tmp = folder / f".{name[:80]}.{os.urandom(8).hex()}.tmp"
        try:
            tmp.write_text(json.dumps({**data, "time": int(time.time())}, indent=2, sort_keys=True) + "\n")
            tmp.chmod(0o644)
            os.replace(tmp, folder / f"{name}.json")
        finally:
            tmp.unlink(missing_ok=True)

    def refs(self, kind: str) -> list[dict[str, Any]]:
        found = []
        for path in sorted((self.root / "refs" / kind).glob("*.json")):
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(path.read_text())
                if isinstance(data, dict):
                    found.append(data)
        return found

    def artifact(self, key: str, target: str, verify: Any = None) -> Entry | None:
        """The published artifact of ``key`` (checked by the store), or None."""
        return self.store.get(key, target, verify) if is_key(key) else None

    # -- holds, use, access --------------------------------------------------------------------------

    def hold(self, key: str, holder: str) -> None:
        holds.hold(self.root, key, holder)

    def release(self, holder: str) -> int:
        """Drop every hold of ``holder``; how many there were (0 the second time: release is idempotent)."""
        dropped = 0
        for path in (self.root / "holds").glob(f"*/{holder}"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                dropped += 1
        return dropped

    def holders(self, key: str) -> tuple[str, ...]:
        """The live holds of ``key`` (listing the folder re-reads it, also on NFS)."""
        folder = self.root / "holds" / key
        now = time.time()
        live = []
        with contextlib.suppress(FileNotFoundError):
            for item in os.scandir(folder):
                with contextlib.suppress(FileNotFoundError):
                    if now - item.stat().st_mtime < self.hold_max_age:
                        live.append(item.name)
        return tuple(sorted(live))

    def touch(self, key: str) -> None:
        """Record a use of ``key`` (any user's use counts)."""
        holds.touch(self.root, key)

    def use_stamp(self, key: str) -> int | None:
        """The use marker's modification time (ns), read through an open file: fresh from an NFS server too."""
        try:
            fd = os.open(self.root / "used" / key, os.O_RDONLY)
        except OSError:
            return None
        try:
            return os.fstat(fd).st_mtime_ns
        finally:
            os.close(fd)

    def last_used(self, entry: Entry) -> float:
        try:
            return (self.root / "used" / entry.key).stat().st_mtime
        except OSError:
            return float(entry.meta.get("created") or 0)

    def grant(self, registry: str, repository: str, who: str) -> None:
        """Remember that the registry let ``who`` (a uid, or ``public``) pull from the repository."""
        path = self._dir("access", safe_name(f"{registry}/{repository}")) / who
        if not path.exists():
            with contextlib.suppress(OSError):
                path.touch(mode=0o644)

    def granted(self, registry: str, repository: str, uid: int) -> bool:
        folder = self.root / "access" / safe_name(f"{registry}/{repository}")
        return (folder / "public").exists() or (folder / str(uid)).exists()

    # -- listing and eviction ------------------------------------------------------------------------

    def entries(self) -> list[CacheEntry]:
        out = []
        for entry in self.store.entries():
            try:
                size = entry.path.stat().st_size
            except OSError:
                continue
            out.append(CacheEntry(entry.key, entry.path, size, self.last_used(entry), self.holders(entry.key),
                                  entry.meta))
        return out

    def total_size(self) -> int:
        return sum(e.size for e in self.entries())

    def evict(self, max_bytes: int, *, dry_run: bool = False, sweep: bool = True) -> list[CacheEntry]:
        """Remove least recently used artifacts no step holds until the cache fits ``max_bytes``, then (unless
        ``sweep`` is off: the caller sweeps) the reuse files only they needed."""
        entries = sorted(self.entries(), key=lambda e: e.last_used)
        total = sum(e.size for e in entries)
        removed = []
        for entry in entries:
            if total <= max_bytes:
                break
            if entry.holds or (not dry_run and not self.remove(entry)):
                continue
            removed.append(entry)
            total -= entry.size
        if removed and sweep and not dry_run:
            self.store.sweep_reuse()
        return removed

    def prune(self, max_bytes: int, older_than: float, *, dry_run: bool = False) -> Pruned:
        """``ckit cache prune``: evict down to ``max_bytes``, remove what dead work left (older than
        ``older_than`` seconds), then the reuse files nothing refers to any more."""
        evicted = self.evict(max_bytes, dry_run=dry_run, sweep=False)
        cleaned = [] if dry_run else self.cleanup(older_than)
        reuse = self.store.sweep_reuse(gone={e.path.name for e in evicted}, dry_run=dry_run, grace=older_than)
        return Pruned(self.root, dry_run, evicted, cleaned, reuse, self.total_size())

    def remove(self, entry: CacheEntry | Entry) -> bool:
        """Delete one artifact unless a step holds it (see the module doc for the order of checks)."""
        stamp = self.use_stamp(entry.key)
        if self.holders(entry.key):
            return False
        aside = entry.path.with_name(f".evict.{entry.key}.{os.urandom(8).hex()}")
        try:
            os.rename(entry.path, aside)
        except OSError:  # already gone, or not ours to remove (a sticky folder)
            return False
        try:
            if self.holders(entry.key) or self.use_stamp(entry.key) != stamp:
                with contextlib.suppress(FileExistsError):
                    os.link(aside, entry.path)
                return False
            (self.store.artifacts / f"{entry.key}.json").unlink(missing_ok=True)
            (self.root / "used" / entry.key).unlink(missing_ok=True)
            return True
        finally:
            aside.unlink(missing_ok=True)

    def cleanup(self, older_than: float) -> list[str]:
        """Remove what dead work left behind: expired holds, leases of processes gone from this host, and temp
        files and work folders older than ``older_than`` seconds that no lease covers."""
        from ..lease import clear_if_gone, read_owner

        now, removed = time.time(), []
        for hold in (self.root / "holds").glob("*/*"):
            with contextlib.suppress(OSError):
                if now - hold.stat().st_mtime >= self.hold_max_age:
                    hold.unlink()
                    removed.append(str(hold))
        locks = self.root / "locks"
        for lease in locks.glob("*.lease"):
            seen = read_owner(lease)
            if clear_if_gone(lease) or (seen is not None and now - seen[0].st_mtime > max(older_than, 3600)):
                lease.unlink(missing_ok=True)
                removed.append(str(lease))
        live = {p.name[:16] for p in locks.glob("*.lease")}
        leftovers = [*self.store.artifacts.glob(".*.tmp"), *self.store.artifacts.glob(".evict.*"),
                     *self.store.work.glob("*"), *locks.glob("*.lease.*")]
        for path in leftovers:
            with contextlib.suppress(OSError):
                if _key16(path) not in live and now - path.stat().st_mtime > older_than:
                    if path.is_dir():
                        import shutil

                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink()
                    removed.append(str(path))
        return removed


def _key16(path: Path) -> str:
    """The key prefix a leftover belongs to: ``.<key16>.x.tmp``, ``.evict.<key>.x``, ``work/<key>``,
    ``locks/<key>.lease.<token>``."""
    parts = path.name.split(".")
    if path.name.startswith(".evict."):
        return parts[2][:16]
    return parts[1][:16] if path.name.startswith(".") else path.name[:16]
