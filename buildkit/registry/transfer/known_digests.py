"""Digests of local files ckit has already read, keyed by the file's identity.

A registry can only be asked whether it has a blob (``HEAD``) by digest, and hashing a large file costs a
whole read of it before the upload's own read. So ckit hashes a file it has not seen while uploading it,
and remembers the digest here; the next push of the unchanged file asks the registry first and sends
nothing when the blob is there. A file ckit pulled is remembered too: its digest was checked as it arrived.

The key is the file's real path, device, inode, size, mtime and ctime (nanoseconds): any write to the file
or its replacement changes the ctime, so a stale digest is never used. Entries live under
``<cache dir>/digests/`` (see :func:`buildkit.storage.store.default_root`), one small file each.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from pathlib import Path

from ...fs.files import atomic_write
from ...outside import ascii_int
from ...storage.store import default_root

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def identity(path: Path) -> str:
    """What makes ``path`` the same file with the same bytes: real path, device, inode, size, mtime, ctime."""
    st = os.stat(path)
    fields = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return hashlib.sha256("\0".join(str(x) for x in fields).encode()).hexdigest()


def _entry(key: str, root: Path | None) -> Path:
    return (root or default_root()) / "digests" / key


def lookup(path: Path, root: Path | None = None) -> str | None:
    """The remembered sha256 digest of ``path`` as it is now, or None."""
    try:
        text = _entry(identity(path), root).read_text().strip()
    except OSError:
        return None
    return text if _DIGEST.match(text) else None


def remember(path: Path, digest: str, seen: str | None = None, root: Path | None = None) -> None:
    """Record ``digest`` for ``path``. ``seen`` is the :func:`identity` the file had when its bytes were read:
    a file that changed since is not recorded. A cache that cannot be written is not an error."""
    with contextlib.suppress(OSError):
        now = identity(path)
        if seen is None or seen == now:
            atomic_write(_entry(now, root), digest.encode() + b"\n")


# -- layers ckit compressed --------------------------------------------------------------------------------
# A plain-tar layer (``diff_id``) compressed by :mod:`.compress` (``method``) gives one blob digest; remembering
# it lets a repeat push ask the registry for that blob (``HEAD``) without compressing the layer again. An entry
# is written only right after ckit compressed the layer and checked its ``diff_id``; the method is part of the
# key, so another compressor (or level, or block size) never reuses a digest it would not produce. When the
# registry lacks the blob, the layer is compressed afresh and the digest taken from the bytes sent.


def _compressed_entry(diff_id: str, method: str, root: Path | None) -> Path:
    key = hashlib.sha256(f"{method}\0{diff_id}".encode()).hexdigest()
    return (root or default_root()) / "digests" / "compressed" / key


def lookup_compressed(diff_id: str, method: str, root: Path | None = None) -> tuple[str, int] | None:
    """(digest, size) of the blob ``method`` made from the layer ``diff_id``, or None."""
    try:
        digest, size = _compressed_entry(diff_id, method, root).read_text().split()
    except (OSError, ValueError):
        return None
    number = ascii_int(size)
    return (digest, number) if _DIGEST.match(digest) and number is not None else None


def remember_compressed(diff_id: str, method: str, digest: str, size: int, root: Path | None = None) -> None:
    with contextlib.suppress(OSError):
        atomic_write(_compressed_entry(diff_id, method, root), f"{digest} {size}\n".encode())
