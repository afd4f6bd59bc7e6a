"""What ``ckit launch`` runs when ``--image`` names a stack or a registry image: the file ``ckit stage`` put in the
site's shared image folder, found through the folder's index (``refs/``, see :mod:`.layout`), never by a guessed
file name.

* ``STACK`` → ``refs/stacks/STACK.<target>.*``: the stack's newest staged build;
* ``REGISTRY/REPO@sha256:…`` → ``refs/images/*@sha256-….<target>.*``: that manifest digest, whatever its name;
* ``REGISTRY/REPO:TAG`` → ``refs/tags/…``: the digest the tag had when it was staged (``ckit stage`` records the
  reference as written and in its canonical form, e.g. ``ubuntu:24.04`` and ``docker.io/library/ubuntu:24.04``).

Only an artifact in the format of the runtime (its backend's ``artifact``: ``.sqsh`` for Pyxis and Charliecloud,
``.sif`` for Singularity/Apptainer; the caller passes it) whose compression the site mounts counts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .holds import is_key
from .layout import safe_name


def expand_folder(text: str | None) -> Path | None:
    """A shared image folder with ``$USER``/``~`` expanded here, or None when it cannot be."""
    if not text:
        return None
    expanded = os.path.expanduser(os.path.expandvars(text))
    return None if "$" in expanded else Path(expanded)


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _pick(folder: Path, pattern: str, target: str, allowed: tuple[str, ...]) -> tuple[Path, dict[str, Any]] | None:
    """The newest record matching ``pattern`` whose artifact exists and whose compression the site mounts."""
    best: tuple[Path, dict[str, Any]] | None = None
    for path in (folder / "refs").glob(pattern):
        record = _load(path)
        if not record or not is_key(record.get("key")):
            continue
        algo = str(record.get("compression", "")).split(":")[0]
        if allowed and algo not in allowed:
            continue
        artifact = folder / "artifacts" / f"{record['key']}.{target}"
        if artifact.is_file() and (best is None or record.get("time", 0) > best[1].get("time", 0)):
            best = (artifact, record)
    return best


def lookup(folder: Path, value: str, target: str, allowed: tuple[str, ...] = (), *,
           stack: bool = False) -> tuple[Path, dict[str, Any]] | None:
    """The staged artifact for a stack name or a registry reference in ``folder``, or None."""
    if stack:
        return _pick(folder, f"stacks/{safe_name(value)}.{target}.*.json", target, allowed)
    name, at, digest = value.removeprefix("docker://").replace("#", "/", 1).partition("@")
    if not at:
        seen = _load(folder / "refs" / "tags" / f"{safe_name(name)}.json")
        digest = seen.get("digest", "") if seen else ""
    algorithm, _, hexdigest = str(digest).partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64 or not all(c in "0123456789abcdef" for c in hexdigest):
        return None
    return _pick(folder, f"images/*@sha256-{hexdigest}.{target}.*.json", target, allowed)


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
