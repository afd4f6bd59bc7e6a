"""Whether a ``.sif``/``.sqsh`` file runs on a site (``ckit stage`` of a file, ``ckit push --site``): its format is
the one the site's runtime runs, its squashfs compression one the site's kernel mounts and, for a ``.sif``, one its
Singularity/Apptainer version reads (:meth:`buildkit.site.model.Site.refusal`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..site.model import Site


def compression_of(path: Path, kind: str) -> str:
    """The squashfs compressor of a ``.sqsh``, or of a ``.sif``'s root file system."""
    from .squashfs.superblock import check

    if kind == "sqsh":
        return check(path).compression
    from .sif.read import read_sif

    part = read_sif(path).primary_partition()
    if part is None:
        raise ConfigError(f"{path}: the SIF has no root file system partition")
    return check(path, part.offset).compression


def check_fits(path: Path, kind: str, site: Site, target: str | None, runtime: str) -> None:
    """Refuse (exit 2) a ``kind`` file that ``site`` cannot run: ``target`` is the format its ``runtime`` runs
    (None: no check of the format)."""
    if target is not None and kind != target:
        raise ConfigError(f"{path} is a .{kind}, but {site.name} runs .{target} files ({runtime})",
                          hint=f"convert it: ckit convert … --to {target} --site {site.name}")
    algo = compression_of(path, kind)
    why = site.refusal(kind, algo)
    if why:
        raise ConfigError(f"{path} is {algo}-compressed; {why}",
                          hint=f"convert it again with --site {site.name}, which picks a compression it runs")
