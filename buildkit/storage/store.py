"""A store: one user's converted images, keyed by source digest plus conversion options.

The personal store (``CKIT_CACHE_DIR``, else the platform's user cache dir, e.g. ``~/.cache/ckit``) is one; each
user's tree in a shared cache folder (``<cache>/u<UID>``, :mod:`.trust`) is another. Layout::

    artifacts/<key>.<sif|sqsh>      the artifact (read-only once published)
    artifacts/<key>.json            its record: the key, what it was made from, options, size, identity
    locks/<key>.lease               held while the artifact is being made (see :mod:`.lease`)
    work/<key>/                     scratch space of the conversion of <key> (spools, temp squashfs)
    reuse/<layer key>.rec           where a layer's data lies in an artifact (``buildkit.image.squashfs.reuse``)
    reuse/<layer digest>.members    the layer's tar members, for the records of that layer

A key is the sha256 of the canonical JSON of the source digest and every option that changes the bytes
(target, compression, ``SOURCE_DATE_EPOCH``, ckit's format version). Publishing is atomic: the producer writes a
temp file in ``artifacts/``, the store verifies it, fsyncs and renames it. Two runs on the same key serialise on the
key's lease: the second finds the artifact published and does no work.

Only the store's owner writes it; a store is read as its owner's (``owner``): a record or an artifact counts only
when it is a regular file of the owner that nobody else may write, the record names the key it is read for, and the
artifact's inode, size and modification time are those the record kept when it was published (any write changes
the mtime). No path is ever taken from a record: every file is named by its key. Artifacts of images fetched with
credentials are published 0600 (``private``), the others 0644; reuse records are the owner's alone (0600). A
personal store's folders are 0700 (made so, or closed when found more open): nobody else lists or reads it; a tree
of a shared cache is 0755, since others are served from it.

Reuse files live only as long as what they point at: every removal of artifacts ends with :meth:`Store.sweep_reuse`,
the one rule of :mod:`.reuse_files`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ConvertError
from ..fs.files import fsync_dir, place_copy
from . import safefs
from .lease import Lease
from .reuse_files import ReuseSweep, sweep

FORMAT_VERSION = 4  # bump when the bytes ckit writes for the same inputs change (2: ckit's own squashfs writer;
# 3: data laid out layer by layer, directory indexes; 4: a .sqsh carries Charliecloud's /ch files and mount points)
ARTIFACT = re.compile(r"([0-9a-f]{64})\.(sif|sqsh)")
SUFFIXES = ("sif", "sqsh")


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


def artifact_mode(suffix: str, private: bool) -> int:
    """A SIF runs through its ``#!`` line; a private image is its owner's alone."""
    mode = 0o755 if suffix == "sif" else 0o644
    return mode & 0o700 if private else mode


class Store:
    """One user's store at ``root`` (see the module doc). ``owner``: whose store it is (default: this user's;
    another user's store is only read). ``base``/``parts``: how to reach ``root`` without following a link that
    its owner could plant (``<cache>``, ``("u1001",)`` for a tree of a shared cache)."""

    def __init__(self, root: Path | None = None, *, owner: int | None = None, base: Path | None = None,
                 parts: tuple[str, ...] = ()) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.owner = os.geteuid() if owner is None else owner
        self.base, self.parts = (base, parts) if base is not None else (self.root, ())
        self.artifacts = self.root / "artifacts"
        self.locks = self.root / "locks"
        self.work = self.root / "work"
        self.on_wait: Callable[[str], None] | None = None  # told who holds a lease this process waits for
        self.holder = ""  # named in the leases this process takes (e.g. the Slurm step of an importer)
        self._leases: dict[str, Lease] = {}

    @property
    def writable(self) -> bool:
        return self.owner == os.geteuid()

    def ensure(self) -> None:
        """The store's folders, made when missing; ConfigError when they are not this user's alone."""
        if not self.writable:
            raise ConvertError(f"{self.root} is uid {self.owner}'s store: ckit writes only its user's own")
        mode = 0o755 if self.parts else 0o700  # a tree of a shared cache serves others; a personal store does not
        try:
            self.root.parent.mkdir(parents=True, exist_ok=True)  # ~/.cache on a new account
            for folder in (self.root, self.artifacts, self.locks, self.work):
                safefs.ensure_dir(folder, mode)
        except safefs.Unsafe as err:
            raise ConfigError(f"store {err}: ckit writes only into a folder of its user's that nobody else may "
                              "write", hint="point CKIT_CACHE_DIR at a folder of your own") from None

    def path(self, key: str, suffix: str) -> Path:
        return self.artifacts / f"{key}.{suffix}"

    def record(self, key: str) -> dict[str, Any] | None:
        """The record of ``key`` when it is sound (the owner's, bounded, names ``key``), else None."""
        raw = safefs.read_small(self.artifacts / f"{key}.json", self.owner)
        try:
            meta = json.loads(raw) if raw is not None else None
        except ValueError:
            return None
        return meta if isinstance(meta, dict) and meta.get("key") == key else None

    def identity(self, key: str, suffix: str) -> tuple[int, int, int] | None:
        """The artifact's inode, size and mtime when it is a sound file of the owner, else None."""
        fd = safefs.open_checked(self.path(key, suffix), self.owner)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            return st.st_ino, st.st_size, st.st_mtime_ns
        finally:
            os.close(fd)

    def get(self, key: str, suffix: str, verify: Callable[[Path], object] | None = None) -> Entry | None:
        """The published artifact, or None. In the owner's own store a file that fails ``verify`` or no longer
        matches its record is removed (and reported as absent)."""
        if suffix not in SUFFIXES or not ARTIFACT.fullmatch(f"{key}.{suffix}"):
            return None
        meta = self.record(key)
        found = self.identity(key, suffix)
        if meta is None or found is None:
            return None
        path = self.path(key, suffix)
        try:
            if meta.get("stat") != list(found) or meta.get("target", suffix) != suffix:
                raise ConvertError(f"{path}: the file changed since it was published")
            if verify is not None:
                verify(path)
        except OSError:
            return None  # could not look (a shared store's hiccup on one node): a miss, not a reason to delete
        except (ValueError, ConvertError):
            if self.writable:
                self.drop(key, suffix)
            return None
        return Entry(key, path, meta)

    def drop(self, key: str, suffix: str) -> None:
        """Remove a damaged artifact and its record, then the reuse records that pointed at it."""
        for name in (f"{key}.{suffix}", f"{key}.json"):
            safefs.unlink_in(self.base, (*self.parts, "artifacts"), name)
        self.sweep_reuse()

    @contextmanager
    def lock(self, key: str, holder: str = "") -> Iterator[Lease]:
        """Exclusive per-key lease (waits while another live holder makes progress; see :mod:`.lease`)."""
        self.ensure()
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

        self.ensure()
        folder = self.work / key
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(mode=0o700)
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def sweep_reuse(self, *, gone: Collection[str] = (), dry_run: bool = False,
                    grace: float | None = None) -> ReuseSweep:
        """Remove the reuse files no artifact of the store needs any more (:func:`.reuse_files.sweep`)."""
        if not self.writable:
            return ReuseSweep()
        return sweep(self.root / "reuse", self.artifacts, gone=gone, dry_run=dry_run, grace=grace)

    def temp_path(self, key: str, suffix: str) -> Path:
        """A fresh temp name in ``artifacts/`` for a producer to write (same folder ⇒ atomic rename)."""
        import tempfile

        self.ensure()
        fd, name = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=f".{suffix}.tmp", dir=self.artifacts)
        os.close(fd)
        return Path(name)

    def clean_temps(self, key: str) -> None:
        """Remove temp files a killed producer of ``key`` left behind (call with the key's lock held): its temp
        artifact and the temp files of writers that themselves write atomically next to it (``..<key>.….tmp``)."""
        for stale in self.artifacts.glob(f".*{key[:16]}.*.tmp"):
            stale.unlink(missing_ok=True)

    def publish(self, key: str, suffix: str, temp: Path, meta: dict[str, Any],
                verify: Callable[[Path], object], *, private: bool = False) -> Entry:
        """Verify ``temp``, then rename it (and its record) into place; ``private``: readable by the owner only."""
        meta_tmp: str | None = None
        try:
            verify(temp)
            with temp.open("rb") as f:
                os.fsync(f.fileno())
            mode = artifact_mode(suffix, private)
            temp.chmod(mode)
            final = self.path(key, suffix)
            st = temp.stat()
            meta = {**meta, "key": key, "size": st.st_size, "stat": [st.st_ino, st.st_size, st.st_mtime_ns]}
            meta_tmp = safefs.write_temp(self.artifacts, f"{key}.json",
                                         (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode(), mode & 0o644)
            lease = self._leases.get(key)
            if lease is not None and lease.lost:
                raise ConvertError(f"{final}: another process took over the lease on this conversion after "
                                   f"{lease.stale:.0f} s without progress; its result counts, not this one")
            os.replace(temp, final)
            os.replace(meta_tmp, self.artifacts / f"{key}.json")
            fsync_dir(self.artifacts)
        except BaseException:
            temp.unlink(missing_ok=True)
            if meta_tmp is not None:
                Path(meta_tmp).unlink(missing_ok=True)
            raise
        return Entry(key, final, meta)

    def entries(self) -> list[Entry]:
        """The published artifacts, named by their keys (a record never names a path)."""
        found = []
        try:
            names = sorted(os.listdir(self.artifacts))
        except OSError:
            return []
        for name in names:
            match = ARTIFACT.fullmatch(name)
            meta = self.record(match.group(1)) if match else None
            if match and meta is not None and meta.get("target", match.group(2)) == match.group(2):
                found.append(Entry(match.group(1), self.artifacts / name, meta))
        return found


def export(src: Path, dest: Path) -> Path:
    """Put a copy of ``src`` at ``dest`` atomically: hardlink when on the same filesystem, else copy (through
    the output guard: ckit replaces only a regular file there)."""
    return place_copy(src, dest)
