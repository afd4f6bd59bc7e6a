"""``ckit render -o DIR/``: a complete build context on disk, for ``docker build DIR`` or, from inside DIR,
``apptainer build out.sif Singularity.def`` (apptainer reads ``%files`` sources relative to where it runs).

The folder is built beside the target and moved in, so an interrupted render leaves no half-written context.
Only a new folder, an empty one, or one ckit rendered before is written to: a user's own ``files/`` or
``Dockerfile`` is never replaced.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..errors import ConfigError
from .context import RECIPE_FILE, ContextFile, write_context

OWN_ENTRIES = {*RECIPE_FILE.values(), "files"}
MARK = b"written by ckit"  # in the header of every rendered Dockerfile and .def


def is_folder_target(text: str) -> bool:
    """``-o DIR/`` (a trailing slash) or an existing folder is a build context; anything else is one file."""
    return text.endswith(("/", os.sep)) or Path(text).is_dir()


def _check_reusable(folder: Path) -> None:
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ConfigError(f"-o {folder}/: {folder} exists and is not a folder")
    entries = {p.name for p in folder.iterdir()}
    foreign = sorted(entries - OWN_ENTRIES)
    ours = [folder / name for name in RECIPE_FILE.values() if (folder / name).is_file()]
    rendered = any(MARK in path.read_bytes()[:512] for path in ours)
    if entries and (foreign or not rendered):
        what = ", ".join(foreign[:3]) if foreign else ", ".join(sorted(entries))
        raise ConfigError(f"-o {folder}/: the folder holds files ckit did not render ({what})",
                          hint="give a new or empty folder; ckit replaces only a build context it wrote")


def write_folder(files: list[ContextFile], folder: Path) -> list[Path]:
    """Write ``files`` (the recipe file and ``files/…``) as the build context in ``folder``; return the paths."""
    folder = Path(folder)
    _check_reusable(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".part", dir=folder.parent))
    try:
        write_context(files, staging)
        if not folder.exists():
            os.rename(staging, folder)
            return [folder / f.path for f in files]
        for entry in sorted(p.name for p in staging.iterdir()):
            target = folder / entry
            if target.is_dir():  # files/ of an earlier render: moved aside, dropped with the staging folder
                os.rename(target, staging / f".old-{entry}")
            os.replace(staging / entry, target)
        if not any(f.path.startswith("files/") for f in files) and (folder / "files").is_dir():
            os.rename(folder / "files", staging / ".old-files")  # an earlier render's copies, not this one's
        return [folder / f.path for f in files]
    finally:
        shutil.rmtree(staging, ignore_errors=True)
