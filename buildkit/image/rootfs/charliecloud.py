"""What a ``.sqsh`` carries for Charliecloud's ``ch-run``, next to Enroot's files (:mod:`.enroot`), so one
file serves Enroot, Pyxis and Charliecloud.

* ``/ch/environment``: the image ENV, the file ``ch-run --set-env`` (no argument) reads; ``/ch/metadata.json``:
  the image metadata as ``ch-image`` records it (``cwd`` is the WorkingDir; ``ch-run --cd`` takes it). Both are
  Charliecloud's own conventions (its ``Image.metadata_save``).
* The mount points ``ch-run`` binds and cannot create in a read-only SquashFS (0.31 fails with "can't bind:
  destination not found" otherwise): ``/dev``, ``/proc``, ``/sys``, ``/tmp``, ``/etc/passwd``, ``/etc/group``;
  the optional ``/etc/hosts`` and ``/etc/resolv.conf`` (bound only when the image has them: a minimal image
  would not resolve node names); ``/home`` for ``--home``; and ``ch-image``'s ``/mnt/0`` … ``/mnt/9`` and volume
  folders, for binds of the user's own folders. Each only where the image has nothing at that path.

``ch-run`` strips one pair of single quotes around a value (``FOO='x'`` sets ``x``): a value that itself starts
and ends with one gets a protecting pair, so it arrives as the image declares it. ``$`` is left as written;
ckit's runtime passes ``--env-no-expand`` (image ENV values are final, as Docker resolved them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from ...errors import ConvertError
from ..model import ImageConfig, RootfsEntry, When

MOUNT_DIRS = ("/dev", "/proc", "/sys", "/home", "/mnt", *(f"/mnt/{n}" for n in range(10)))
MOUNT_FILES = ("/etc/passwd", "/etc/group", "/etc/hosts", "/etc/resolv.conf")


def _variables(config: ImageConfig) -> dict[str, str]:
    """Name → value, the last of a repeated name winning (as in Docker); entries without a name or ``=`` set
    nothing (Enroot drops them too, and ``ch-run`` would refuse the whole file)."""
    out: dict[str, str] = {}
    for entry in config.env:
        name, eq, value = entry.partition("=")
        try:
            entry.encode()
        except UnicodeEncodeError as err:
            raise ConvertError(f"image ENV entry {entry!r} is not valid UTF-8") from err
        if "\n" in entry or "\r" in entry or "\0" in entry:
            raise ConvertError(f"image ENV variable {name!r} has a value with a line break or NUL, which "
                               "/ch/environment cannot hold", hint=f"remove the line break from {name} in the image")
        if eq and name:
            out[name] = value
    return out


def _protect(value: str) -> str:
    return f"'{value}'" if len(value) >= 2 and value[0] == value[-1] == "'" else value


def environment_text(config: ImageConfig) -> str:
    """``NAME=VALUE`` lines sorted by name, as ``ch-image`` writes them, each read back by ``ch-run`` verbatim."""
    return "".join(f"{name}={_protect(value)}\n" for name, value in sorted(_variables(config).items()))


def metadata_text(config: ImageConfig) -> str:
    """``ch-image``'s metadata.json (the keys of its ``metadata_init``), pretty-printed with sorted keys like it."""
    shell = config.raw.get("Shell")
    metadata = {
        "arch": config.architecture, "arg": {}, "cwd": config.working_dir or "/", "env": _variables(config),
        "history": [], "labels": dict(config.labels), "volumes": list(config.volumes),
        "shell": list(shell) if isinstance(shell, list) and all(isinstance(s, str) for s in shell)
        else ["/bin/sh", "-c"],
    }
    return json.dumps(metadata, indent=2, sort_keys=True) + "\n"  # ASCII, \u escapes: any string is written


def _mount_points(config: ImageConfig) -> Iterable[RootfsEntry]:
    for path in MOUNT_DIRS:
        yield RootfsEntry(path, "dir", 0o755, when=When.IF_ABSENT)
    yield RootfsEntry("/tmp", "dir", 0o1777, when=When.IF_ABSENT)
    for path in MOUNT_FILES:
        yield RootfsEntry(path, "file", 0o644, when=When.IF_ABSENT)
    for volume in config.volumes:
        if not volume.startswith("/") or ".." in volume.split("/"):
            raise ConvertError(f"image volume {volume!r} must be an absolute path without '..'",
                               hint="fix the volume path in the image")
        yield RootfsEntry(volume, "dir", 0o755, when=When.IF_ABSENT)


def entries(config: ImageConfig) -> list[RootfsEntry]:
    """Everything added for Charliecloud on top of the image and Enroot's files, in write order."""
    return [
        RootfsEntry("/ch", "dir", 0o755),
        RootfsEntry("/ch/environment", "file", 0o644, environment_text(config).encode()),
        RootfsEntry("/ch/metadata.json", "file", 0o644, metadata_text(config).encode()),
        *_mount_points(config),
    ]
