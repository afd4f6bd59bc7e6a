"""Layered folders: user folders (``--recipes``/``--sites`` and an environment variable) over built-ins.

A file in a user folder overrides the built-in file with the same relative path. Earlier folders win:
command-line folders first (in the order given), then the environment variable's entries, then the
built-in data shipped with the package.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

_PACKAGE = Path(__file__).resolve().parent.parent


def builtin_dir(kind: str) -> Path:
    """The built-in ``recipes`` or ``sites`` folder: package data when installed, the source tree otherwise."""
    installed = _PACKAGE / "data" / kind
    if installed.is_dir():
        return installed
    source = _PACKAGE.parent / kind
    if source.is_dir():
        return source
    raise ConfigError(f"built-in {kind} folder not found (looked in {installed} and {source})",
                      hint="reinstall ckit")


@dataclass(frozen=True)
class SearchPath:
    """Folders searched in order; the first that holds a relative path wins."""

    kind: str
    folders: tuple[Path, ...]

    @classmethod
    def build(cls, kind: str, cli_dirs: Sequence[Path], env_var: str) -> SearchPath:
        folders: list[Path] = []
        env_value = os.environ.get(env_var, "")
        for raw, origin in [*((d, "--" + kind) for d in cli_dirs),
                            *((Path(p), env_var) for p in env_value.split(os.pathsep) if p)]:
            folder = Path(raw).expanduser()
            if not folder.is_dir():
                raise ConfigError(f"{kind} folder {folder} (from {origin}) does not exist or is not a folder",
                                  hint=f"create it or fix {origin}")
            folders.append(folder.resolve())
        folders.append(builtin_dir(kind))
        return cls(kind=kind, folders=tuple(folders))

    def find(self, relative: str) -> Path | None:
        for folder in self.folders:
            candidate = folder / relative
            if candidate.is_file():
                return candidate
        return None

    def names(self, subdir: str = "", suffix: str = ".yaml") -> list[str]:
        """Stem names of all files in ``subdir`` across the folders, de-duplicated and sorted."""
        found: set[str] = set()
        for folder in self.folders:
            base = folder / subdir if subdir else folder
            if base.is_dir():
                found.update(p.name[: -len(suffix)] for p in base.iterdir() if p.name.endswith(suffix) and p.is_file())
        return sorted(found)

    def require(self, subdir: str, name: str, *, what: str, suffix: str = ".yaml") -> Path:
        relative = f"{subdir}/{name}{suffix}" if subdir else f"{name}{suffix}"
        found = self.find(relative)
        if found is None:
            raise ConfigError(f"unknown {what} '{name}'", hint=suggest(name, self.names(subdir, suffix)))
        return found


def suggest(name: str, choices: Iterable[str]) -> str:
    choices = sorted(choices)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    if close:
        return f"did you mean '{close[0]}'?"
    return f"choose one of: {', '.join(choices)}" if choices else "none are defined"
