"""Values shared by the image readers, the rootfs writers and the converters."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI/Docker image config that the runtimes care about.

    ``raw`` is the image config's ``config`` object exactly as read (used for SIF ``oci-config.json``).
    ``labels`` keeps the JSON input order (Enroot's ``/etc/rc`` lists labels in that order).
    """

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    working_dir: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    volumes: tuple[str, ...] = ()
    user: str = ""
    architecture: str = "amd64"
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_image_config(cls, blob: Mapping[str, Any]) -> ImageConfig:
        """Build from a whole image config blob (``{"architecture":…, "config":{…}, "rootfs":…}``)."""
        config = blob.get("config") or blob.get("Config") or {}
        return cls(
            entrypoint=tuple(config.get("Entrypoint") or ()),
            cmd=tuple(config.get("Cmd") or ()),
            env=tuple(config.get("Env") or ()),
            working_dir=config.get("WorkingDir") or "",
            labels=tuple((str(k), str(v)) for k, v in (config.get("Labels") or {}).items()),
            volumes=tuple(sorted(config.get("Volumes") or {})),
            user=config.get("User") or "",
            architecture=blob.get("architecture") or "amd64",
            raw=dict(config),
        )


class When(enum.Enum):
    """When a rootfs addition is written over what the image already has at that path."""

    ALWAYS = "always"  # replace whatever is there (file, symlink or empty dir)
    IF_ABSENT = "if_absent"  # only when the image has nothing at the path
    UNLESS_REGULAR = "unless_regular"  # create, or re-point an existing symlink; keep a real file or dir


@dataclass(frozen=True)
class RootfsEntry:
    """One file, directory or symlink that a converter adds on top of the flattened image."""

    path: str  # absolute path inside the image, e.g. "/etc/rc"
    kind: str  # "file" | "dir" | "symlink"
    mode: int = 0o644
    data: bytes = b""
    target: str = ""  # symlink target
    when: When = When.ALWAYS
    uid: int = 0
    gid: int = 0
