"""What dead work leaves in a user's own tree of a cache, and its removal (``ckit cache prune``)."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

from .holds import is_live
from .lease import clear_if_gone, read_owner
from .store import Store


def leftovers(store: Store, older_than: float, hold_max_age: float) -> list[str]:
    """Remove expired holds, leases of processes gone from this host, and temp files and work folders older than
    ``older_than`` seconds that no lease covers; what was removed."""
    now, removed = time.time(), []
    for hold in (store.root / "holds").glob("*/*"):
        with contextlib.suppress(OSError):
            if not is_live(hold.lstat(), now, hold_max_age):
                hold.unlink()
                removed.append(str(hold))
    for lease in store.locks.glob("*.lease"):
        seen = read_owner(lease)
        if clear_if_gone(lease) or (seen is not None and now - seen[0].st_mtime > max(older_than, 3600)):
            lease.unlink(missing_ok=True)
            removed.append(str(lease))
    live = {p.name[:16] for p in store.locks.glob("*.lease")}
    found = [*store.artifacts.glob(".*.tmp"), *store.artifacts.glob(".evict.*"), *store.work.glob("*"),
             *store.locks.glob("*.lease.*")]
    for path in found:
        with contextlib.suppress(OSError):
            if _key16(path) not in live and now - path.lstat().st_mtime > older_than:
                if path.is_dir() and not path.is_symlink():
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
