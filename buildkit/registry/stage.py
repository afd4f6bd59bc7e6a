"""``ckit stage``: put a verified artifact into a site's shared image folder (for compute nodes without internet).

The source is a registry reference (pulled, digest-checked while streaming) or a local ``.sif``/``.sqsh``
file (copied; its sha256 is recorded). Either way the file appears at its final path only after the check.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, IntegrityError
from ..fs.files import atomic_path
from .distribution.streams import READ_SIZE
from .transfer.artifacts import detect_kind


def expand_dir(text: str) -> Path:
    """A site folder with ``$USER``/``~`` expanded; unknown variables are bad input."""
    expanded = os.path.expanduser(os.path.expandvars(text))
    if "$" in expanded:
        raise ConfigError(f"shared image folder {text!r} names an unset variable",
                          hint="set the variable or pass --dest DIR")
    return Path(expanded)


def stage_dir(site_dir: str | None, dest: Path | None, site: str) -> Path:
    if dest is not None:
        return dest
    if not site_dir:
        raise ConfigError(f"site {site!r} has no shared_image_dir", hint="pass --dest DIR")
    return expand_dir(site_dir)


@dataclass(frozen=True)
class Staged:
    path: Path
    digest: str
    size: int
    source: str

    def as_json(self) -> dict[str, object]:
        return {"path": str(self.path), "digest": self.digest, "size": self.size, "source": self.source}


def copy_verified(src: Path, dest_dir: Path, expected_digest: str | None = None) -> Staged:
    """Copy a local artifact into ``dest_dir`` hashing what is written; rename only when it matches."""
    import hashlib

    detect_kind(src)
    dest_dir.mkdir(parents=True, exist_ok=True)
    final = dest_dir / src.name
    h_src, size = hashlib.sha256(), 0

    def matches(tmp: Path) -> None:
        h_out = hashlib.sha256()
        with open(tmp, "rb") as back:
            while chunk := back.read(READ_SIZE):
                h_out.update(chunk)
        digest = "sha256:" + h_src.hexdigest()
        if h_out.hexdigest() != h_src.hexdigest() or (expected_digest and digest != expected_digest):
            raise IntegrityError(f"staged copy of {src} does not match "
                                 f"{expected_digest or 'the source'} (got sha256:{h_out.hexdigest()})")

    mode = src.stat().st_mode & 0o7777
    with atomic_path(final, mode=mode, verify=matches, inputs=[src]) as tmp, open(src, "rb") as inp, \
            open(tmp, "wb") as out:
        while chunk := inp.read(READ_SIZE):
            h_src.update(chunk)
            out.write(chunk)
            size += len(chunk)
    return Staged(final, "sha256:" + h_src.hexdigest(), size, str(src))
