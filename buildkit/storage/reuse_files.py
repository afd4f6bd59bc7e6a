"""The store's ``reuse/`` folder: the framing of its files, and the one rule that removes what no artifact needs.

    reuse/<record key>.rec             where a layer's data lies in one artifact (``buildkit.image.squashfs.reuse``)
    reuse/<layer digest>.members       the layer's tar members, for the records of that layer

A record is a magic line, the sha256 of the rest, a refs line (:class:`ReuseRefs`: its layer, the artifact that
holds the data and that artifact's identity as published, the members file's body sha256), then its packed body.
The refs line can be read without the body: a sweep reads a few hundred bytes per record. A members file is a
magic line, the sha256 of its body, the body. What the bodies hold is :mod:`buildkit.image.squashfs.reuse`'s.

The rule (:func:`sweep`), applied by every removal of artifacts (a damaged one dropped by the store, eviction
and ``ckit cache prune``): a record goes when its artifact is gone, was replaced or changed (its identity), or
the record cannot be read; then every members file that no remaining record names goes. Deleting is safe while a
conversion reads: files are written by rename and read whole, so a reader sees a file whole or not at all, and a
missing one only means that layer is converted (or downloaded) without reuse. A producer writes a layer's
members file just before the record that names it, and touches a members file it names again, so files younger
than the grace period (the lease stale time: what a live producer never exceeds between the two) wait for the
next sweep.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fs.files import identity
from ..oci.digest import is_valid
from . import safefs
from .lease import stale_seconds

RECORD_MAGIC = b"ckit-reuse 4\n"  # 4: the body in columns (buildkit.image.squashfs.record)
MEMBERS_MAGIC = b"ckit-members 1\n"
HEAD_MAX = 4096  # a record's refs line is a few hundred bytes
ARTIFACT_NAME = re.compile(r"[0-9a-f]{64}\.(sif|sqsh)")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ReuseRefs:
    """What a reuse record points at: its layer (a verified digest), the artifact that holds the layer's data
    (its file name in ``artifacts/`` and its identity as published) and the sha256 of its members file's body."""

    layer: str
    artifact: str
    stat: tuple[int, int, int]
    members: str

    def line(self) -> bytes:
        return json.dumps({"artifact": self.artifact, "layer": self.layer, "members": self.members,
                           "stat": list(self.stat)}, separators=(",", ":"), sort_keys=True).encode()


def members_name(layer: str) -> str:
    """The file name of ``layer``'s members file in ``reuse/`` (ValueError unless ``layer`` is a digest)."""
    if not is_valid(layer):
        raise ValueError(f"not a digest: {layer!r}")
    return f"{layer.replace(':', '-')}.members"


def frame_record(refs: ReuseRefs, packed: bytes) -> bytes:
    """A record file: magic line, the sha256 of the rest, the refs line, the packed body."""
    rest = refs.line() + b"\n" + packed
    return RECORD_MAGIC + hashlib.sha256(rest).hexdigest().encode() + b"\n" + rest


def record_refs(raw: bytes, *, verify: bool = True) -> tuple[ReuseRefs, bytes]:
    """A record's refs and packed body (ValueError unless ``raw`` is one). ``verify``: the digest is checked;
    without it ``raw`` may be just the file's first :data:`HEAD_MAX` bytes (what a sweep reads)."""
    head = len(RECORD_MAGIC) + 65
    if not raw.startswith(RECORD_MAGIC) or raw[head - 1:head] != b"\n":
        raise ValueError("not a reuse record")
    end = raw.find(b"\n", head, head + HEAD_MAX)
    if end < 0:
        raise ValueError("no refs line")
    if verify and hashlib.sha256(raw[head:]).hexdigest() != raw[len(RECORD_MAGIC):head - 1].decode("latin-1"):
        raise ValueError("digest mismatch")
    data = json.loads(raw[head:end])
    try:
        stat = tuple(data["stat"])
        refs = ReuseRefs(data["layer"], data["artifact"], stat, data["members"])
        sound = (is_valid(refs.layer) and ARTIFACT_NAME.fullmatch(refs.artifact)
                 and SHA256_HEX.fullmatch(refs.members) and len(stat) == 3
                 and all(type(n) is int and n >= 0 for n in stat))
    except (KeyError, TypeError) as err:
        raise ValueError(f"malformed refs line: {err}") from err
    if not sound:
        raise ValueError("malformed refs line")
    return refs, raw[end + 1:]


def members_head(raw: bytes) -> tuple[str, int]:
    """The sha256 a members file states for its body (not checked here) and where the body starts."""
    head = len(MEMBERS_MAGIC) + 65
    sha = raw[len(MEMBERS_MAGIC):head - 1].decode("latin-1")
    if not raw.startswith(MEMBERS_MAGIC) or raw[head - 1:head] != b"\n" or not SHA256_HEX.fullmatch(sha):
        raise ValueError("not a members file")
    return sha, head


@dataclass
class ReuseSweep:
    """What a sweep of ``reuse/`` removed (or, in a dry run, would remove) and what it kept."""

    removed: list[str] = field(default_factory=list)  # file names in reuse/
    freed: int = 0  # bytes
    kept: int = 0  # files
    kept_bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"removed_records": sum(n.endswith(".rec") for n in self.removed),
                "removed_members": sum(n.endswith(".members") for n in self.removed),
                "freed_bytes": self.freed, "kept_files": self.kept, "kept_bytes": self.kept_bytes}


def sweep(folder: Path, artifacts: Path, *, gone: Collection[str] = (), dry_run: bool = False,
          grace: float | None = None) -> ReuseSweep:
    """Remove the reuse files nothing refers to any more (the rule of the module doc): records whose artifact
    is gone, changed or named in ``gone`` (artifact file names a dry run of an eviction would remove), or
    that cannot be read, then members files no remaining record names, and writers' leftover temp files.
    Files younger than ``grace`` seconds (default: the lease stale time) wait for the next sweep."""
    result, now = ReuseSweep(), time.time()
    grace = stale_seconds() if grace is None else grace
    files: dict[str, os.stat_result] = {}
    with contextlib.suppress(OSError), os.scandir(folder) as listing:
        for item in listing:
            with contextlib.suppress(OSError):
                if item.is_file(follow_symlinks=False):
                    files[item.name] = item.stat(follow_symlinks=False)
    stated = {name: _stated_sha(folder / name) for name in files if name.endswith(".members")}
    named: set[tuple[str, str]] = set()

    def living(refs: ReuseRefs, young: bool) -> bool:
        return refs.artifact not in gone and _identity_is(artifacts / refs.artifact, refs.stat) \
            and (young or stated.get(members_name(refs.layer)) == refs.members)

    for name in (n for n in files if n.endswith(".rec")):
        refs = _head_refs(folder / name)
        if refs is not None and living(refs, now - files[name].st_mtime < grace):
            named.add((members_name(refs.layer), refs.members))
        elif dry_run or _unlinked(folder / name, files[name].st_ino):
            result.removed.append(name)
        else:  # replaced meanwhile by a producer: what the new version names stays
            refs = _head_refs(folder / name)
            if refs is not None:
                named.add((members_name(refs.layer), refs.members))
    for name, st in files.items():
        unnamed = name.endswith(".members") and (name, stated[name]) not in named
        leftover = name.startswith(".") and name.endswith(".tmp")  # a killed writer's
        if (unnamed or leftover) and now - st.st_mtime >= grace and (dry_run or _unlinked(folder / name, st.st_ino)):
            result.removed.append(name)
    result.freed = sum(files[name].st_size for name in result.removed)
    removed = set(result.removed)
    kept = [st.st_size for name, st in files.items() if name not in removed]
    result.kept, result.kept_bytes = len(kept), sum(kept)
    return result


def _identity_is(path: Path, stat: tuple[int, int, int]) -> bool:
    try:
        return identity(path) == stat
    except OSError:
        return False


def _head(path: Path, size: int) -> bytes | None:
    fd = safefs.open_checked(path, os.geteuid())  # the store's own regular file, never through a link
    if fd is None:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def _head_refs(path: Path) -> ReuseRefs | None:
    raw = _head(path, len(RECORD_MAGIC) + 65 + HEAD_MAX)
    try:
        return record_refs(raw, verify=False)[0] if raw is not None else None
    except ValueError:
        return None


def _stated_sha(path: Path) -> str | None:
    raw = _head(path, len(MEMBERS_MAGIC) + 65)
    try:
        return members_head(raw)[0] if raw is not None else None
    except ValueError:
        return None


def _unlinked(path: Path, inode: int) -> bool:
    """Remove ``path`` unless it was replaced since it was judged (a producer renamed a new version into place)."""
    try:
        if path.stat().st_ino != inode:
            return False
        path.unlink()
    except OSError:  # gone already, or not this user's to remove (a shared store's sticky folder)
        return False
    return True
