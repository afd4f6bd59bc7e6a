"""The local artifact store: converted images keyed by source digest plus conversion options.

Layout under the cache dir (``CKIT_CACHE_DIR``, else the platform's user cache dir, e.g. ``~/.cache/ckit``)::

    artifacts/<key>.<sif|sqsh>      the artifact (read-only once published)
    artifacts/<key>.json            what it was made from: source, digest, options, size
    locks/<key>.lease               held while the artifact is being made (see :mod:`buildkit.lease`)
    work/<key>/                     scratch space of the conversion of <key> (spools, temp squashfs)
    reuse/<layer key>.rec           where a layer's data lies in an artifact (``buildkit.image.squashfs_reuse``)
    reuse/<layer digest>.members    the layer's tar members, for the records of that layer

A key is the sha256 of the canonical JSON of the source digest and every option that changes the bytes
(target, compression, ``SOURCE_DATE_EPOCH``, ckit's format version). Publishing is atomic: the producer writes a
temp file in ``artifacts/``, the store verifies it, fsyncs and renames it. Two runs on the same key serialise on the
key's lease: the second finds the artifact published and does no work. The lease needs no ``flock`` (the store may be a
cluster file system shared by many users and nodes), and a holder that dies or stops making progress is taken
over after ``CKIT_LOCK_STALE_SECONDS`` (120 s) instead of blocking every later conversion of that image.

Folders the store creates get the permission bits of its root, so a root an admin made group- or world-writable
(``2775``, ``0777``) stays usable by every user; artifacts and records are readable by everyone (0644).

The record keeps the artifact's inode, size and modification time as published. Any write to the file changes
its mtime, so an entry whose file no longer matches its record (modified in place, even at the same size, or
replaced) is dropped and made again instead of being served.

Reuse files live only as long as what they point at: every removal of artifacts (a damaged one dropped here,
eviction and ``ckit cache prune`` in :mod:`buildkit.cachedir.layout`) ends with :meth:`Store.sweep_reuse`, the
one rule of :mod:`buildkit.reuse_files`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConvertError
from .fsbase import make_dir
from .fsutil import fsync_dir, identity, place_copy
from .lease import Lease
from .reuse_files import ReuseSweep, sweep

FORMAT_VERSION = 4  # bump when the bytes ckit writes for the same inputs change (2: ckit's own squashfs writer;
# 3: data laid out layer by layer, directory indexes; 4: a .sqsh carries Charliecloud's /ch files and mount points)


def default_root() -> Path:
    env = os.environ.get("CKIT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("ckit"))


def make_key(**options: Any) -> str:
    options.setdefault("format_version", FORMAT_VERSION)
    canonical = json.dumps(options, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    meta: dict[str, Any]


class Store:
    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.artifacts = self.root / "artifacts"
        self.locks = self.root / "locks"
        self.work = self.root / "work"
        self.on_wait: Callable[[str], None] | None = None  # told who holds a lease this process waits for
        self.holder = ""  # named in the leases this process takes (e.g. the Slurm step of an importer)
        self._leases: dict[str, Lease] = {}

    def _ensure(self) -> None:
        for folder in (self.artifacts, self.locks, self.work):
            make_dir(folder, self.root)

    def path(self, key: str, suffix: str) -> Path:
        return self.artifacts / f"{key}.{suffix}"

    def get(self, key: str, suffix: str, verify: Callable[[Path], object] | None = None) -> Entry | None:
        """The published artifact, or None. A file that fails ``verify`` is removed (and reported as absent)."""
        path = self.path(key, suffix)
        meta_path = self.artifacts / f"{key}.json"
        if not path.is_file() or not meta_path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            if not isinstance(meta, dict) or meta.get("stat") != list(identity(path)):
                raise ConvertError(f"{path}: the file changed since it was published")
            if verify is not None:
                verify(path)
        except OSError:
            return None  # could not look (a shared store's hiccup on one node): a miss, not a reason to delete
        except (ValueError, ConvertError):
            path.unlink(missing_ok=True)
            meta_path.unlink(missing_ok=True)
            self.sweep_reuse()  # its reuse records point at nothing now
            return None
        return Entry(key, path, meta)

    @contextmanager
    def lock(self, key: str, holder: str = "") -> Iterator[Lease]:
        """Exclusive per-key lease (waits while another live holder makes progress; see :mod:`buildkit.lease`)."""
        self._ensure()
        lease = Lease(self.locks / f"{key}.lease", holder=holder or self.holder, on_wait=self.on_wait)
        with lease:
            self._leases[key] = lease
            try:
                yield lease
            finally:
                self._leases.pop(key, None)

    @contextmanager
    def workdir(self, key: str) -> Iterator[Path]:
        """Scratch folder of the producer of ``key`` (hold the key's lock), emptied before and after."""
        import shutil  # here, not at the top: the importer's cached path never needs it

        self._ensure()
        folder = self.work / key
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def sweep_reuse(self, *, gone: Collection[str] = (), dry_run: bool = False,
                    grace: float | None = None) -> ReuseSweep:
        """Remove the reuse files no artifact of the store needs any more (:func:`buildkit.reuse_files.sweep`)."""
        return sweep(self.root / "reuse", self.artifacts, gone=gone, dry_run=dry_run, grace=grace)

    def temp_path(self, key: str, suffix: str) -> Path:
        """A fresh temp name in ``artifacts/`` for a producer to write (same folder ⇒ atomic rename)."""
        import tempfile

        self._ensure()
        fd, name = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=f".{suffix}.tmp", dir=self.artifacts)
        os.close(fd)
        return Path(name)

    def clean_temps(self, key: str) -> None:
        """Remove temp files a killed producer of ``key`` left behind (call with the key's lock held): its temp
        artifact and the temp files of writers that themselves write atomically next to it (``..<key>.….tmp``)."""
        for stale in self.artifacts.glob(f".*{key[:16]}.*.tmp"):
            stale.unlink(missing_ok=True)

    def publish(self, key: str, suffix: str, temp: Path, meta: dict[str, Any],
                verify: Callable[[Path], object]) -> Entry:
        """Verify ``temp``, then rename it (and its record) into place."""
        try:
            verify(temp)
            with temp.open("rb") as f:
                os.fsync(f.fileno())
            temp.chmod(0o755 if suffix == "sif" else 0o644)  # a SIF runs via its #! line
            final = self.path(key, suffix)
            meta = {**meta, "key": key, "size": temp.stat().st_size, "stat": list(identity(temp))}  # kept by rename
            meta_tmp = temp.with_suffix(".json.tmp")
            meta_tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            meta_tmp.chmod(0o644)  # other users of a shared store read it whatever this user's umask
            lease = self._leases.get(key)
            if lease is not None and lease.lost:
                raise ConvertError(f"{final}: another process took over the lease on this conversion after "
                                   f"{lease.stale:.0f} s without progress; its result counts, not this one")
            os.replace(temp, final)
            os.replace(meta_tmp, self.artifacts / f"{key}.json")
            fsync_dir(self.artifacts)
        except BaseException:
            temp.unlink(missing_ok=True)
            temp.with_suffix(".json.tmp").unlink(missing_ok=True)
            raise
        return Entry(key, final, meta)

    def entries(self) -> list[Entry]:
        found = []
        for meta_path in sorted(self.artifacts.glob("*.json")):
            try:
                meta = json.loads(meta_path.read_text())
            except (ValueError, OSError):
                continue
            path = self.path(meta_path.stem, meta.get("target", ""))
            if path.is_file():
                found.append(Entry(meta_path.stem, path, meta))
        return found




def export(src: Path, dest: Path) -> Path:
    """Put a copy of ``src`` at ``dest`` atomically: hardlink when on the same filesystem, else copy (through
    the output guard: ckit replaces only a regular file there)."""
    return place_copy(src, dest)
