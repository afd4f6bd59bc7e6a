"""Values shared by the image readers, the rootfs writers and the converters."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config.jsondoc import strings, typed
from ..errors import ConvertError


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
    def from_image_config(cls, blob: Mapping[str, Any], what: str = "the image config") -> ImageConfig:
        """Build from a whole image config blob (``{"architecture":…, "config":{…}, "rootfs":…}``), every field
        type-checked: an Entrypoint given as one string, a label that is a number… is a ConvertError naming it,
        never a mangled script or a traceback."""
        if not isinstance(blob, Mapping):
            raise ConvertError(f"{what} must be a JSON object")
        config = blob.get("config") or blob.get("Config") or {}
        if not isinstance(config, Mapping):
            raise ConvertError(f"{what}: config must be a JSON object, not {type(config).__name__}")
        labels = typed(config, "Labels", dict, what, error=ConvertError, default={})
        if not all(isinstance(v, str) for v in labels.values()):
            raise ConvertError(f"{what}: Labels must map names to strings")
        return cls(
            entrypoint=tuple(strings(config, "Entrypoint", what, error=ConvertError)),
            cmd=tuple(strings(config, "Cmd", what, error=ConvertError)),
            env=tuple(strings(config, "Env", what, error=ConvertError)),
            working_dir=typed(config, "WorkingDir", str, what, error=ConvertError, default=""),
            labels=tuple((str(k), v) for k, v in labels.items()),
            volumes=tuple(sorted(typed(config, "Volumes", dict, what, error=ConvertError, default={}))),
            user=typed(config, "User", str, what, error=ConvertError, default=""),
            architecture=typed(blob, "architecture", str, what, error=ConvertError, default="") or "amd64",
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
