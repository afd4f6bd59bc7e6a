"""A process's identity on this host: its pid and its start time, so that a reused pid is not taken for it.

Standard library only and cheap to import: the Pyxis importer reads it before its own start-up (see
:mod:`buildkit.importer.peers`), leases read it for every holder on this host (:mod:`buildkit.storage.lease`).
"""

from __future__ import annotations

import os


def process_start(pid: int) -> str | None:
    """The start time of ``pid`` (clock ticks since boot), or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else ""


def own_start() -> str:
    """This process's start time."""
    return process_start(os.getpid()) or ""
