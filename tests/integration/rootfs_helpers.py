"""Writing a converter's rootfs additions into a plain directory, for tests that run or pack them there."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from buildkit.image.model import RootfsEntry


def materialize(root: Path, entries: Iterable[RootfsEntry]) -> None:
    """Write rootfs additions under ``root`` (the converter streams them into the tar instead)."""
    for entry in entries:
        path = root / entry.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if entry.kind == "dir":
            path.mkdir(exist_ok=True)
        elif entry.kind == "symlink":
            path.symlink_to(entry.target)
        else:
            path.write_bytes(entry.data)
            path.chmod(entry.mode)
