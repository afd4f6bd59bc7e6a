"""A step's hold on a cached artifact and the artifact's use stamp: the two writes a reader makes *before* it
looks the artifact up (see :mod:`.layout` for why that order keeps eviction from racing it).

Standard library only and cheap to import: a Pyxis importer that is handed its image by a peer on the same node
(:mod:`buildkit.cache.peers`) takes its hold through this module without loading the cache machinery.
"""

from __future__ import annotations

import os
import time

from ..fsbase import make_dir, quietly

_HEX = frozenset("0123456789abcdef")


def is_key(value: object) -> bool:
    """A store key (64 hex digits): what a record must name before it becomes part of a path."""
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)


def hold(root: str | os.PathLike[str], key: str, holder: str) -> None:
    """``holds/<key>/<holder>``: the step ``holder`` uses ``key``, eviction skips it until released or expired."""
    if not is_key(key) or "/" in holder or holder in ("", ".", ".."):
        raise ValueError(f"not a cache key and holder: {key!r} {holder!r}")
    folder = os.path.join(root, "holds", key)
    make_dir(folder, root)
    with open(os.path.join(folder, holder), "w", encoding="ascii") as out:  # the content is for people
        out.write(f'{{"pid": {os.getpid()}, "uid": {os.getuid()}, "time": {int(time.time())}}}\n')


def touch(root: str | os.PathLike[str], key: str) -> None:
    """Record a use of ``key`` (the stamp is writable by everyone, so any user's use counts)."""
    folder = os.path.join(root, "used")
    make_dir(folder, root)
    path = os.path.join(folder, key)
    try:
        os.utime(path)
    except FileNotFoundError:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
        except OSError:
            return
        quietly(os.fchmod, fd, 0o666)
        os.close(fd)
    except PermissionError:
        pass
