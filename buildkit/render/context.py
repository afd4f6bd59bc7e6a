"""Build contexts: the rendered file plus every file the recipe copies in, as a deterministic tar."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..recipe.model import Copy, ResolvedRecipe
from . import dockerfile, singularity

RECIPE_FILE = {"docker": "Dockerfile", "singularity": "Singularity.def"}


@dataclass(frozen=True)
class ContextFile:
    path: str  # relative path in the context
    data: bytes
    mode: int


def render(recipe: ResolvedRecipe, fmt: str, *, base_override: str | None = None) -> str:
    if fmt == "docker":
        return dockerfile.render(recipe, base_override=base_override)
    if fmt == "singularity":
        return singularity.render(recipe, base_override=base_override)
    raise ValueError(f"unknown format {fmt!r}")


def _files(source: Path, context: str) -> list[ContextFile]:
    if source.is_file():
        return [ContextFile(context, source.read_bytes(), source.stat().st_mode & 0o777)]
    out = []
    for item in sorted(source.rglob("*")):
        if item.is_file() and not item.is_symlink():
            rel = item.relative_to(source).as_posix()
            out.append(ContextFile(f"{context}/{rel}", item.read_bytes(), item.stat().st_mode & 0o777))
    return out


def build_context(recipe: ResolvedRecipe, fmt: str, *, base_override: str | None = None) -> list[ContextFile]:
    """The recipe file (``Dockerfile`` or ``Singularity.def``) and the files it copies, sorted by path."""
    files = [ContextFile(RECIPE_FILE[fmt], render(recipe, fmt, base_override=base_override).encode(), 0o644)]
    for step in recipe.steps:
        if isinstance(step, Copy):
            files += _files(step.source, step.context)
    return sorted(files, key=lambda f: f.path)


def context_tar(files: list[ContextFile]) -> bytes:
    """An uncompressed tar of ``files`` with fixed owners and times (same input, same bytes)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for f in files:
            parts = f.path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)
            info = tarfile.TarInfo(f.path)
            info.size, info.mode, info.mtime = len(f.data), f.mode, 0
            tar.addfile(info, io.BytesIO(f.data))
    return buffer.getvalue()


def write_context(files: list[ContextFile], folder: Path) -> None:
    """Write ``files`` under ``folder`` (for engines that build from a directory, like apptainer)."""
    for f in files:
        target = folder / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.data)
        target.chmod(f.mode)
