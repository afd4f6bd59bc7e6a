"""Atomic artifacts: write next to the destination, verify, then rename into place.

An interrupted or failed write never leaves a file at the final path. Every
writer of a user-visible file goes through :func:`atomic_path`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(
    final: Path,
    *,
    mode: int = 0o644,
    suffix: str = ".part",
    verify: Callable[[Path], None] | None = None,
) -> Iterator[Path]:
    """Yield a temporary path (mode 0600) in ``final``'s folder; when the block succeeds, fsync it, ``verify``
    it, set ``mode`` and rename it to ``final``.

    On any exception (KeyboardInterrupt included) the temporary file is removed and ``final`` is untouched.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix, dir=final.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        if verify is not None:
            verify(tmp)
        tmp.chmod(mode)
        os.replace(tmp, final)
        fsync_dir(final.parent)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(final: Path, data: bytes, *, mode: int = 0o644) -> None:
    with atomic_path(final, mode=mode) as tmp:
        tmp.write_bytes(data)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
