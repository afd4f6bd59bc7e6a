"""Which Python an image runs a function with, and the versions of the packages that must match the
submitting Python: read from the ``.sif``/``.sqsh`` file itself (its squashfs listing and environment), so the
check needs no container runtime on the submitting machine and happens before anything is queued.

A pickled function is code for one Python ``major.minor``; cloudpickle and submitit read what their own
version wrote. The image's ``python3`` is found as the runtime would: along the image's PATH (its
``/.singularity.d/env``, ``/etc/environment`` or ``/ch/environment``), links followed inside the image, a venv's
``pyvenv.cfg`` honoured (with or without the system's packages).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CkitError
from . import inspect as reader

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PATH_LINE = re.compile(r"^\s*(?:export\s+)?PATH=[\"']?([^\"'\n]*)[\"']?\s*$", re.MULTILINE)
_VERSIONED = re.compile(r"python([0-9]+\.[0-9]+)$")
_DIST = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[0-9][^-]*?)\.(?:dist|egg)-info$")
ENV_FILES = {"sif": ("/.singularity.d/env/10-docker2singularity.sh", "/.singularity.d/env/90-environment.sh"),
             "sqsh": ("/etc/environment", "/ch/environment")}


@dataclass(frozen=True)
class ImagePython:
    """The Python a command ``python`` runs in an image, and the versions of the packages it imports."""

    executable: str  # the path inside the image
    version: str | None  # major.minor, None when the binary's name does not say
    packages: dict[str, str] = field(default_factory=dict)  # normalised name -> version


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


class _Tree:
    """An image's file listing (``unsquashfs -ll``): kinds and link targets by absolute path."""

    def __init__(self, path: Path, offset: int) -> None:
        from ..process import run

        self.reader = reader.SquashReader(path, offset)
        listing = run(["unsquashfs", "-o", str(offset), "-ll", "-d", "", str(path)],
                      step="list the image's files", timeout=300).stdout
        self.kinds: dict[str, str] = {}
        self.links: dict[str, str] = {}
        self.children: dict[str, list[str]] = {}
        for line in listing.splitlines():
            parts = line.split(None, 5)
            if len(parts) < 6 or parts[0][:1] not in "-dl":
                continue
            name, _, target = parts[5].partition(" -> ") if parts[0][0] == "l" else (parts[5], "", "")
            name = "/" + name.lstrip("/")
            self.kinds[name] = parts[0][0]
            self.children.setdefault(posixpath.dirname(name), []).append(posixpath.basename(name))
            if target:
                self.links[name] = target

    def resolve(self, name: str) -> str | None:
        """``name`` with the links along it followed inside the image; None when it leads nowhere."""
        for _ in range(40):
            if name in self.links:
                target = self.links[name]
                name = posixpath.normpath(target if target.startswith("/") else
                                          posixpath.join(posixpath.dirname(name), target))
                continue
            parent = posixpath.dirname(name)
            real_parent = self._resolve_dir(parent)
            if real_parent != parent:
                name = posixpath.join(real_parent, posixpath.basename(name))
                continue
            return name if name in self.kinds else None
        return None

    def _resolve_dir(self, folder: str) -> str:
        if folder in ("/", ""):
            return "/"
        parent = self._resolve_dir(posixpath.dirname(folder))
        joined = posixpath.join(parent, posixpath.basename(folder))
        seen = 0
        while joined in self.links and seen < 40:
            target = self.links[joined]
            joined = posixpath.normpath(target if target.startswith("/") else
                                        posixpath.join(posixpath.dirname(joined), target))
            seen += 1
        return joined


def _image_path(tree: _Tree, kind: str) -> list[str]:
    value = DEFAULT_PATH
    for name in ENV_FILES[kind]:
        text = tree.reader.cat(name) or ""
        for match in _PATH_LINE.finditer(text):
            value = re.sub(r"\$\{?PATH\}?", value, match.group(1))
    return [d for d in value.split(":") if d.startswith("/")]


def _site_dirs(tree: _Tree, executable: str, version: str) -> list[str]:
    """Where that Python imports from: a venv's own site-packages first, then the system's."""
    prefix = posixpath.dirname(posixpath.dirname(executable))
    system = [f"{p}/lib/python{version}/{d}" for p in ("/usr/local", "/usr") for d in ("dist-packages",
                                                                                         "site-packages")]
    system.append("/usr/lib/python3/dist-packages")
    cfg = tree.reader.cat(f"{prefix}/pyvenv.cfg") if f"{prefix}/pyvenv.cfg" in tree.kinds else None
    if cfg is None:
        real = tree.resolve(executable) or executable
        base = posixpath.dirname(posixpath.dirname(real))
        return [f"{base}/lib/python{version}/site-packages", *system]
    own = [f"{prefix}/lib/python{version}/site-packages"]
    shared = re.search(r"^\s*include-system-site-packages\s*=\s*true\s*$", cfg, re.MULTILINE | re.IGNORECASE)
    return own + (system if shared else [])


def image_python(path: Path, python: str = "python3") -> ImagePython | None:
    """The Python ``python`` names in the image file ``path`` (a ``.sif`` or ``.sqsh``); None when the image
    has no such program on its PATH, or is not one ckit can read."""
    try:
        offset = reader.squashfs_offset(path)
        if offset is None:
            return None
        kind = "sqsh" if offset == 0 else "sif"
        tree = _Tree(path, offset)
    except (CkitError, OSError):
        return None
    candidates = [python] if python.startswith("/") else [
        f"{d.rstrip('/')}/{python}" for d in _image_path(tree, kind)]
    executable = next((c for c in candidates if tree.resolve(c) is not None), None)
    if executable is None:
        return None
    real = tree.resolve(executable) or executable
    match = _VERSIONED.search(posixpath.basename(real))
    if match is None:
        return ImagePython(executable, None)
    version = match.group(1)
    packages: dict[str, str] = {}
    for folder in _site_dirs(tree, executable, version):
        for name in tree.children.get(tree.resolve(folder) or folder, []):
            dist = _DIST.match(name)
            if dist:
                packages.setdefault(_norm(dist.group("name")), dist.group("version"))
    return ImagePython(executable, version, packages)
