"""A step's hold on a cached artifact and its user's use stamp: the two writes a reader makes *before* it looks the
artifact up (see :mod:`.cache` for why that order keeps eviction from racing it).

Both are files in the reader's own tree (``holds/<key>/<holder>``, ``used/<key>``), whichever tree the artifact is
in: no other user can remove, redirect or forge them. Evictors read every tree's holds and stamps.

Standard library only and cheap to import: a Pyxis importer that is handed its image by a peer on the same node
(:mod:`buildkit.importer.peers`) takes its hold through this module without loading the cache machinery.
"""

from __future__ import annotations

import os
import stat
import time

from . import safefs

_HEX = frozenset("0123456789abcdef")
CLOCK_SKEW = 300.0  # seconds a hold taken on another node may seem to lie in the future (clocks drift apart)


def is_key(value: object) -> bool:
    """A store key (64 hex digits): what a record must name before it becomes part of a path."""
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)


def is_live(st: os.stat_result, now: float, max_age: float) -> bool:
    """A hold counts only as a regular file (a link or anything else is none) dated within its lifetime: a date in
    the future (beyond the clocks' drift) is a forgery that would pin the artifact for ever."""
    return stat.S_ISREG(st.st_mode) and -CLOCK_SKEW <= now - st.st_mtime < max_age


def is_holder(value: str) -> bool:
    return bool(value) and "/" not in value and value not in (".", "..") and len(value) <= 200 and "\0" not in value


def hold(tree: str | os.PathLike[str], key: str, holder: str) -> None:
    """``holds/<key>/<holder>`` in this user's tree: the step ``holder`` uses ``key``, eviction skips it until
    released or expired. OSError when the tree cannot be written; :class:`.safefs.Unsafe` for a planted path."""
    if not is_key(key) or not is_holder(holder):
        raise ValueError(f"not a cache key and holder: {key!r} {holder!r}")
    folder = os.path.join(tree, "holds")
    safefs.ensure_dir(folder, 0o755)
    safefs.ensure_dir(os.path.join(folder, key), 0o755)
    data = f'{{"pid": {os.getpid()}, "uid": {os.geteuid()}, "time": {int(time.time())}}}\n'  # for people
    safefs.write_file(os.path.join(folder, key), holder, data.encode("ascii"), 0o644)


def touch(tree: str | os.PathLike[str], key: str) -> None:
    """Record this user's use of ``key`` (best effort: a tree that cannot be written records nothing)."""
    if not is_key(key):
        return
    folder = os.path.join(tree, "used")
    try:
        safefs.ensure_dir(folder, 0o755)
    except (OSError, safefs.Unsafe):
        return
    safefs.touch(os.path.join(folder, key), 0o644)
