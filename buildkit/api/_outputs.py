"""Where ``convert`` and ``build`` put their files besides the store: the name an image gets in a folder (as
``apptainer pull`` and ``enroot import`` name theirs), never over a file that is not already this artifact; and the
personal store kept under its size cap afterwards."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError
from ..outside import shown


def _ref_name(ref: str) -> str:
    """``registry/team/ubuntu:22.04`` → ``ubuntu_22.04``; ``ubuntu@sha256:abc…`` → ``ubuntu_abc…`` (12 digits);
    no tag → ``_latest``."""
    ref, _, digest = ref.partition("@")
    repo, _, tag = ref.rsplit("/", 1)[-1].partition(":")
    return f"{repo}_{tag or (digest.rpartition(':')[2][:12] if digest else 'latest')}"


def output_name(source: str, target: str) -> str:
    """The file name of ``source`` converted to ``target`` in a folder: ``docker://ubuntu:22.04`` →
    ``ubuntu_22.04.sif``; ``docker-archive:img.tar`` → ``img.sqsh``; ``oci:layout:v1`` → ``layout_v1.sif``."""
    from ..oci.sources import form_of, split_path_ref

    form = form_of(source)
    rest = source[len(form.prefix):] if form is not None else source
    if form is not None and form.has_path:
        path, ref = split_path_ref(rest)
        base = re.sub(r"(\.tar(\.gz)?|\.tgz)$", "", path.resolve().name)
        name = _ref_name(ref) if ref and (":" in ref or "/" in ref) else base + (f"_{ref}" if ref else "")
    else:
        name = _ref_name(rest)
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", name).lstrip(".-") or "image"
    return f"{name[:200]}.{target}"


def named_output(source: str, target: str, folder: Path) -> Path:
    """``folder``/:func:`output_name`, refused before any work when a file is there that cannot be an earlier
    copy of an artifact of the store (a hard link of one)."""
    path = folder / output_name(source, target)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return path
    if not path.is_file() or path.is_symlink() or st.st_nlink < 2:
        raise _exists(path)
    return path


def _exists(path: Path) -> ConfigError:
    return ConfigError(f"{shown(path)} exists: ckit does not replace a file it names itself",
                       hint=f"remove it, write elsewhere with -o DIR, or replace it by naming it: -o {shown(path)}")


def place_named(artifact: Path, path: Path) -> Path:
    """The store's ``artifact`` at ``path`` (a hard link, else a copy), which is either free or this artifact."""
    from ..storage.store import export

    if path.exists() or path.is_symlink():
        if not path.is_symlink() and os.path.samefile(artifact, path):
            return path
        raise _exists(path)
    return export(artifact, path)


def cap_store(max_size: int | None, outputs: Sequence[Path]) -> None:
    """Stamp the personal store's artifacts behind ``outputs`` as used (a hard link of one, or one itself), then,
    with a cap, evict the least recently used others beyond ``max_size`` bytes."""
    from ..storage import personal
    from ..storage.store import Store

    store = Store()
    seen = set()
    for output in outputs:
        try:
            seen.add((output.stat().st_dev, output.stat().st_ino))
        except OSError:
            continue
    keep = set()
    for entry in store.entries():
        try:
            st = entry.path.stat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            keep.add(entry.key)
            personal.stamp(store, entry.key)
    if max_size is not None:
        personal.evict(store, max_size, keep=keep)
