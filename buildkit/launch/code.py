"""``--code DIR[:DEST]``: the user's code folder shipped with the job, laid over the image at DEST, so that an
edit costs packing that folder, never a rebuild, reconversion, restaging or pull of the image.

The folder is read when the launch is planned (:func:`scan`: what it holds and its digest, which the job script
names) and written when the job is (:func:`pack`): a read-only copy under the submit folder,
``.ckit/code/DIGEST/``, which every node sees as it sees the job's logs, and which each runtime binds read-only at
DEST. The copy is what the job runs, not the folder: an edit after ``ckit launch`` (while the job waits in the
queue) changes no job already submitted, and the digest in the job record says exactly which code a job ran.

Each file's content is kept once, in ``.ckit/code/objects/`` (by its SHA-256), and every copy is a tree of hard
links to those objects: a second launch after a one-line edit copies one file and links the rest. A file whose
size, mtime, ctime and inode match the last scan of the same folder keeps that scan's digest without being read
again (the index in the user's cache); one modified within :data:`RACY` seconds of that scan is read anyway, as
a second edit within the clock's granularity would look unchanged. Packing reads every new file once, hashing
while it copies, and fails, naming the file, when its content is not the one the job script was written for.

Left out: ``.git`` (the history, not the code) and ``__pycache__`` (Python writes its own). Symbolic links are
kept as links, pointing where they pointed; a FIFO, socket or device in the folder is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, LaunchError

FOLDER = ".ckit/code"  # under the submit folder: the copies and their objects
SKIPPED = frozenset({".git", "__pycache__"})
RACY = 2.0  # seconds: a file modified this close to the last scan is read again
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Entry:
    """One thing in the code folder: ``kind`` f (file), d (folder) or l (symbolic link); ``value`` a file's
    SHA-256 (hex) or a link's target."""

    path: str  # relative, with /
    kind: str
    executable: bool = False
    value: str = ""
    size: int = 0


@dataclass(frozen=True)
class CodeTree:
    """The code folder as the job will run it: its entries, its digest and where it goes."""

    source: str  # the folder's absolute path
    dest: str  # where it is laid over the image
    entries: tuple[Entry, ...]
    digest: str  # sha256:HEX of the entries
    stats: tuple[tuple[str, int, int, int, int, str], ...] = ()  # (path, size, mtime_ns, ctime_ns, inode, sha)

    @property
    def name(self) -> str:
        """The copy's folder name under :data:`FOLDER` (the digest, shortened as git does)."""
        return self.digest.removeprefix("sha256:")[:20]

    @property
    def folder(self) -> str:
        """The copy, relative to the submit folder."""
        return f"{FOLDER}/{self.name}"

    @property
    def files(self) -> int:
        return sum(1 for e in self.entries if e.kind == "f")

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)


def parse(value: str) -> tuple[str, str | None]:
    """``DIR[:DEST]`` as (DIR, DEST or None); DEST must be absolute."""
    folder, sep, dest = value.rpartition(":")
    if not sep:
        folder, dest = value, ""
    if not folder.strip() or "\n" in value:
        raise ConfigError(f"--code {value!r} is not DIR[:DEST]", hint="e.g. --code app or --code app:/workspace/app")
    if sep and (not dest.startswith("/") or "," in dest or dest.rstrip("/") == ""):
        raise ConfigError(f"--code {value!r}: DEST {dest!r} is not an absolute folder in the image",
                          hint="e.g. --code app:/workspace/app (without ',' or ':')")
    return folder, (dest.rstrip("/") if sep else None)


def default_index() -> Path:
    """Where the stats of the last scan of each code folder are kept (the user's own cache)."""
    from ..storage.store import default_root

    return default_root() / "code-index"


def _index_file(index: Path, source: str) -> Path:
    return index / f"{hashlib.sha256(source.encode()).hexdigest()[:24]}.json"


def _known(index: Path | None, source: str) -> dict[str, tuple[int, int, int, int, str]]:
    """The last scan's stats of each file, those old enough to trust (see RACY)."""
    if index is None:
        return {}
    try:
        data = json.loads(_index_file(index, source).read_text())
        scanned, rows = float(data["scanned"]), data["files"]
        return {r[0]: (r[1], r[2], r[3], r[4], r[5]) for r in rows if r[2] / 1e9 < scanned - RACY}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return {}  # none yet, or another version's: every file is read


def _walk(root: Path) -> list[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (sorted, relative), without SKIPPED folders; unreadable folders refused."""
    out: list[tuple[str, os.stat_result]] = []
    pending = [""]
    while pending:
        rel = pending.pop()
        try:
            with os.scandir(root / rel if rel else root) as it:
                found = sorted((e.name, e.stat(follow_symlinks=False)) for e in it if e.name not in SKIPPED)
        except OSError as err:
            raise ConfigError(f"--code: cannot read the folder {root / rel}: {err.strerror}",
                              hint="make it readable, or leave it out of the code folder") from err
        for name, st in found:
            path = f"{rel}/{name}" if rel else name
            out.append((path, st))
            if stat.S_ISDIR(st.st_mode):
                pending.append(path)
    return sorted(out)


def _hash(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as err:
        raise ConfigError(f"--code: cannot read {path}: {err.strerror}",
                          hint="make it readable, or move it out of the code folder") from err


def scan(folder: Path, dest: str, index: Path | None = None) -> CodeTree:
    """What ``folder`` holds, with its digest (reads only; :func:`pack` writes the copy)."""
    root = folder.expanduser().resolve()
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise ConfigError(f"--code {folder}: {root} {what}", hint="give the folder of your code, e.g. --code app")
    known, entries, stats = _known(index, str(root)), [], []
    for path, st in _walk(root):
        if stat.S_ISDIR(st.st_mode):
            entries.append(Entry(path, "d"))
        elif stat.S_ISLNK(st.st_mode):
            entries.append(Entry(path, "l", value=os.readlink(root / path)))
        elif stat.S_ISREG(st.st_mode):
            key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            old = known.get(path)
            sha = old[4] if old is not None and old[:4] == key else _hash(root / path)
            entries.append(Entry(path, "f", bool(st.st_mode & 0o111), sha, st.st_size))
            stats.append((path, *key, sha))
        else:
            raise ConfigError(f"--code: {root / path} is a FIFO, socket or device, which a job's code cannot hold",
                              hint="move it out of the code folder")
    digest = hashlib.sha256()
    for e in entries:
        digest.update(f"{e.kind} {int(e.executable)} {e.path}\0{e.value}\n".encode("utf-8", "surrogateescape"))
    return CodeTree(str(root), dest, tuple(entries), "sha256:" + digest.hexdigest(), tuple(stats))


def _object(objects: Path, source: Path, entry: Entry) -> Path:
    """The object holding ``entry``'s content (copied from ``source`` now, hashed as it is copied)."""
    obj = objects / (entry.value + ("-x" if entry.executable else ""))
    if obj.exists():
        return obj
    fd, tmp = tempfile.mkstemp(dir=objects, prefix=".part-")
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, source.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != entry.value:
            raise LaunchError(f"--code: {source} changed while ckit packed it; nothing was submitted",
                              hint="run ckit launch again once the file is saved")
        os.chmod(tmp, 0o555 if entry.executable else 0o444)
        os.replace(tmp, obj)
    except OSError as err:
        raise LaunchError(f"--code: cannot copy {source} into {objects}: {err.strerror}",
                          hint="the submit folder needs room and write access for the job's code") from err
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return obj


def _fill(tree: CodeTree, into: Path, objects: Path) -> None:
    source = Path(tree.source)
    for entry in tree.entries:
        target = into / entry.path
        if entry.kind == "d":
            target.mkdir()
        elif entry.kind == "l":
            target.symlink_to(entry.value)
        else:
            obj = _object(objects, source / entry.path, entry)
            try:
                os.link(obj, target)
            except OSError:  # a file system without hard links, or an object at its link limit
                target.write_bytes(obj.read_bytes())
                os.chmod(target, 0o555 if entry.executable else 0o444)


def _save_index(index: Path, tree: CodeTree, scanned: float) -> None:
    with contextlib.suppress(OSError):  # a cache: without it the next launch reads every file again
        index.mkdir(parents=True, exist_ok=True, mode=0o700)
        final = _index_file(index, tree.source)
        fd, tmp = tempfile.mkstemp(dir=index, prefix=".part-")
        with os.fdopen(fd, "w") as out:
            json.dump({"source": tree.source, "scanned": scanned, "files": [list(s) for s in tree.stats]}, out)
        os.replace(tmp, final)


def pack(tree: CodeTree, submit_dir: Path, index: Path | None = None) -> tuple[Path, bool]:
    """The read-only copy of ``tree`` under ``submit_dir`` (made now, or the one an earlier launch made: the
    same digest is the same code) and whether it was made now."""
    scanned = time.time()
    root = submit_dir / FOLDER
    final = root / tree.name
    if final.is_dir():
        if index is not None:
            _save_index(index, tree, scanned)
        return final, False
    objects = root / "objects"
    try:
        objects.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=root, prefix=f".part-{tree.name}-"))
    except OSError as err:
        raise LaunchError(f"--code: cannot write {root}: {err.strerror}",
                          hint="launch from a folder you can write (the job's code goes under .ckit/code)") from err
    try:
        _fill(tree, work, objects)
        os.chmod(work, 0o755)
        os.rename(work, final)
    except FileExistsError:
        pass  # another launch of the same code made it first
    except OSError as err:
        if not final.is_dir():
            raise LaunchError(f"--code: cannot write {final}: {err.strerror}",
                              hint="the submit folder needs room and write access for the job's code") from err
    finally:
        if work.exists():
            _remove(work)
    if index is not None:
        _save_index(index, tree, scanned)
    return final, True


def _remove(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
