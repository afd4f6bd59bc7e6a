"""What ``ckit launch`` runs when ``--image`` names a stack or a registry image: the file ``ckit stage`` put in the
site's shared image folder, found through the index of the folder's trusted trees (``refs/``, see :mod:`.cache` and
:mod:`.trust`), never by a guessed file name.

* ``STACK`` → ``refs/stacks/STACK.<target>.*``: the stack's newest staged build;
* ``REGISTRY/REPO@sha256:…`` → ``refs/images/*@sha256-….<target>.*``: that manifest digest, whatever its name;
* ``REGISTRY/REPO:TAG`` → ``refs/tags/…``: the digest the tag had when it was staged (``ckit stage`` records the
  reference as written and in its canonical form, e.g. ``ubuntu:24.04`` and ``docker.io/library/ubuntu:24.04``).

Only an artifact in the format of the runtime (its backend's ``artifact``: ``.sqsh`` for Pyxis and Charliecloud,
``.sif`` for Singularity/Apptainer; the caller passes it) whose compression the site mounts counts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..fs.files import glob_escape
from .cache import CacheDir, safe_name
from .holds import is_key


def expand_folder(text: str | None) -> Path | None:
    """A shared image folder with ``$USER``/``~`` expanded here, or None when it cannot be."""
    if not text:
        return None
    expanded = os.path.expanduser(os.path.expandvars(text))
    return None if "$" in expanded else Path(expanded)


def _pick(cache: CacheDir, kind: str, pattern: str, target: str, allowed: tuple[str, ...],
          want: Callable[[dict[str, Any]], bool]) -> tuple[Path, dict[str, Any]] | None:
    """The newest record matching ``pattern`` in a trusted tree whose artifact there is sound and whose
    compression the site mounts."""
    best: tuple[Path, dict[str, Any]] | None = None
    for store in cache.readers():
        for record in cache.ref_files(store, kind, pattern):
            if not is_key(record.get("key")) or record.get("target", target) != target or not want(record):
                continue
            algo = str(record.get("compression", "")).split(":")[0]
            if allowed and algo not in allowed:
                continue
            entry = store.get(record["key"], target)
            newer = best is None or _time(record) > _time(best[1])
            if entry is not None and newer:
                best = (entry.path, record)
    return best


def _time(record: dict[str, Any]) -> float:
    value = record.get("time", 0)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def lookup(folder: Path, value: str, target: str, allowed: tuple[str, ...] = (), *,
           stack: bool = False) -> tuple[Path, dict[str, Any]] | None:
    """The staged artifact for a stack name or a registry reference in ``folder``, or None."""
    cache = CacheDir(folder)
    if stack:
        return _pick(cache, "stacks", f"{glob_escape(safe_name(value))}.{target}.*.json", target, allowed,
                     lambda r: r.get("stack") == value)
    name, at, digest = value.removeprefix("docker://").replace("#", "/", 1).partition("@")
    if not at:
        seen = cache.find_refs("tags", safe_name(name))
        digest = seen[0][1].get("digest", "") if seen else ""
    algorithm, _, hexdigest = str(digest).partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64 or not all(c in "0123456789abcdef" for c in hexdigest):
        return None
    return _pick(cache, "images", f"*@sha256-{hexdigest}.{target}.*.json", target, allowed,
                 lambda r: r.get("digest") == f"sha256:{hexdigest}")


def find_staged(value: str, *, runtime: str, target: str | None, shared_dir: str | None,
                compressions: tuple[str, ...], site: str, stack: bool) -> str | None:
    """The path of what was staged for ``value`` for ``runtime`` (which runs ``target`` files, None: none) in the
    site's shared folder; None when nothing was (a registry reference then runs from the registry). A stack that
    was never staged is bad input."""
    folder = expand_folder(shared_dir)
    if stack and (target is None or folder is None):
        if target is None:
            raise ConfigError(f"--image {value}: the {runtime} runtime runs registry images, not staged stacks",
                              hint="give a registry reference")
        why = "has no shared image folder" if not shared_dir else f"cannot expand {shared_dir} here"
        raise ConfigError(f"--image {value}: {site} {why} for staged stacks",
                          hint="give the image's path or registry reference")
    if target is None or folder is None:
        return None
    found = lookup(folder, value, target, compressions, stack=stack)
    if found is None and stack:
        raise ConfigError(f"--image {value}: nothing is staged for stack {value} (.{target} for {runtime}) in {folder}",
                          hint=f"build it, then run `ckit stage {value} --site {site}` on a machine that sees {folder}")
    return str(found[0]) if found else None
