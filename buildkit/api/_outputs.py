"""Where ``convert`` and ``build`` put their files besides the store: the name an image gets in a folder (as
``apptainer pull`` and ``enroot import`` name theirs), never over a file that is not already this artifact; and the
personal store kept under its size cap afterwards."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
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


def output_folder(output: str | Path | None, *, several: bool = False) -> Path | None:
    """The folder ``-o`` names, made when missing: one that exists, a path written with a trailing ``/``, or
    any path when there are several artifacts; None: ``output`` names a file (or nothing)."""
    if output is None:
        return None
    text = os.fspath(output)
    # os.path.isdir: a name too long for the file system is the output guard's to refuse (exit 2), not an OSError
    if not (text.endswith(("/", os.sep)) or os.path.isdir(text) or several):
        return None
    folder = Path(text)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError as err:
        raise ConfigError(f"-o {shown(text)}: {shown(err.filename or text)} is a file, not a folder",
                          hint="give a folder (-o DIR/)" + ("" if several else " or a file name (-o FILE)")) from err
    except OSError as err:
        raise ConfigError(f"-o {shown(text)}: cannot make the folder: {err.strerror}",
                          hint="give a folder you can write") from err
    return folder


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


def older_builds(stack: str, output: Path) -> list[Path]:
    """The earlier builds of ``stack`` in the format of ``output`` that ``ckit build -o`` left in its folder
    (``STACK-FINGERPRINT12[-locked].sif``, the same lock suffix as ``output``): regular files, not ``output``."""
    locked = "-locked" if output.stem.endswith("-locked") else ""
    pattern = re.compile(re.escape(stack) + r"-[0-9a-f]{12}" + re.escape(locked + output.suffix))
    try:
        siblings = list(output.parent.iterdir())
    except OSError:
        return []
    return sorted(p for p in siblings if pattern.fullmatch(p.name) and p.name != output.name
                  and p.is_file() and not p.is_symlink())


def drop_older_builds(stack: str, outputs: Sequence[Path], on_phase: Callable[[str], None]) -> dict[Path, list[str]]:
    """Remove what :func:`older_builds` finds next to each new output: one build per stack and format stays in an
    ``-o`` folder (each edit of a recipe is a new fingerprint; the copies would pile up outside the store's cap)."""
    dropped: dict[Path, list[str]] = {}
    for output in outputs:
        for old in older_builds(stack, output):
            try:
                size = old.stat().st_size
                old.unlink()
            except OSError as err:
                on_phase(f"kept the earlier build {shown(old)}: {err.strerror}")
                continue
            dropped.setdefault(output, []).append(str(old))
            on_phase(f"removed the earlier build {shown(old)} ({size / 1e6:.1f} MB): {shown(output.name)} replaces it")
    return dropped


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
