"""Gets of one image on one node step aside for the first: it converts, the others only wait for it.

When several job steps on one node ask for the same image at once (a shared node, array jobs, or several
``srun`` of one job), one of them converts and the others wait for its lease. The waiters still start Python,
read the config and ask the registry (their own access check) at the same time as the converter starts, and on a
node with few CPUs that start-up storm delays the conversion everyone waits for. So the first ``get`` of a URI
leaves a marker in the node's temporary folder, and a ``get`` that finds a live one lowers its own CPU priority
before it does anything else (nice 19): it runs on CPU the converter leaves idle. Not ``SCHED_IDLE``: an
unprivileged process cannot leave either again, and a nice-19 waiter still gets a share (about 1.5 %) of a CPU
that a job's own work keeps busy after the conversion, where an idle-class one could starve.

The marker is a hint only: it decides priority, never what is served (the lease and the store's records do that).
A marker of a process that is gone is replaced; a symlink or a file that is not one is ignored. This module
imports only the standard library's cheapest modules, since it runs before anything else of the importer.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Mapping

from ..procstat import own_start, process_start

MARKER_BYTES = 64


def marker_path(uri: str, env: Mapping[str, str]) -> str:
    folder = env.get("TMPDIR") or "/tmp"  # noqa: S108 (node-local; written O_EXCL under a name of its own, linked)
    return os.path.join(folder, f"ckit-importer-{hashlib.sha256(uri.encode()).hexdigest()[:24]}.busy")


def _alive(path: str) -> bool:
    """Whether the marker at ``path`` names a process that still runs (a symlink or junk counts as absent)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        text = os.read(fd, MARKER_BYTES).decode("ascii", "replace").split()
    finally:
        os.close(fd)
    if len(text) != 2 or not text[0].isdigit():
        return False
    return process_start(int(text[0])) == text[1]


def _step_aside() -> None:
    with contextlib.suppress(OSError):
        os.nice(19)


def claim(uri: str, env: Mapping[str, str]) -> str | None:
    """Leave this process's marker for ``uri`` and return its path (give it to :func:`drop`), or, when a live
    process already left one, step aside and return None."""
    path = marker_path(uri, env)
    own = f"{path}.{os.getpid()}"
    with contextlib.suppress(OSError):
        os.unlink(own)  # a crashed process's of the same pid (another user's is not ours to remove: O_EXCL fails)
    try:  # written whole under a name of its own, then linked: a marker is never seen half written
        fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {own_start()}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        return None  # no usable temporary folder: no courtesy, nothing else changes
    try:
        for _ in range(2):
            try:
                os.link(own, path)
                return path
            except FileExistsError:
                if _alive(path):
                    _step_aside()
                    return None
                with contextlib.suppress(OSError):
                    os.unlink(path)  # the marker of a process that is gone: replace it (a lost race is harmless)
            except OSError:
                return None
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(own)


def drop(path: str | None) -> None:
    """Remove this process's marker (only if it is still this process's)."""
    if path is None:
        return
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            mine = os.read(fd, MARKER_BYTES).split()[:1] == [str(os.getpid()).encode()]
        finally:
            os.close(fd)
        if mine:
            os.unlink(path)
