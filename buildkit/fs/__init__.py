"""Files and folders, in one place: here the primitives that need nothing but ``os`` (a file's identity, folders
made inside a shared root), in :mod:`.files` the atomic artifacts, the output guard and the bounded readers.

This package's root is cheap to import on purpose: a Pyxis importer handed its image by a peer on the same node
uses it without loading anything else (see :mod:`buildkit.importer.peers`).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing's: see the module doc
if TYPE_CHECKING:
    from collections.abc import Callable


def make_dir(folder: str | os.PathLike[str], root: str | os.PathLike[str]) -> None:
    """Create ``folder`` (and its parents up to ``root``) with ``root``'s permission bits once ``root`` exists."""
    folder, root = os.path.normpath(folder), os.path.normpath(root)
    if os.path.isdir(folder):
        return
    os.makedirs(root, exist_ok=True)
    bits = os.stat(root).st_mode & 0o7777
    missing = []
    path = folder
    while path != root and path.startswith(root + os.sep) and not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        if bits & 0o022:  # shared on purpose: keep the admin's bits (umask would drop group/other write)
            quietly(os.chmod, path, bits)


def identity(path: str | os.PathLike[str]) -> tuple[int, int, int]:
    """What changes when a file's bytes do: inode, size and mtime (ns). Linking does not change them (OSError when
    the file is gone)."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def quietly(call: Callable[..., object], *args: object) -> None:
    """``call(*args)`` with an OSError ignored: ``contextlib.suppress`` without loading ``contextlib``."""
    try:  # noqa: SIM105 (see the docstring)
        call(*args)
    except OSError:
        pass
